//! The manager end to end: a range that turns hot is promoted (smaps shows the huge page), a
//! scattered hot set is compacted by a callback with the data byte-identical, tracking stops
//! when placement settled, notices arrive by every route, the budget holds, and bad input gets
//! one clear error each.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kioku_hugepage::{
    huge_mapped_bytes, huge_page_size, hugetlb_pages, smaps_huge, AccessOptions, ArenaId,
    BackendKind, CompactRequest, HugeError, HugeKind, HugeMemory, Manager, PageRange, Policy,
};

const PS: usize = 4096;

/// An aligned mapping of `huge` huge pages, filled with a per-page pattern; unmapped on drop.
struct Arena {
    addr: usize,
    len: usize,
    _fd: Option<std::fs::File>,
}

impl Arena {
    fn new(huge: usize, shared: bool) -> Arena {
        let h = huge_page_size();
        let len = huge * h;
        // SAFETY: a fresh reservation, trimmed to an aligned window below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + h,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        } as usize;
        let addr = raw.div_ceil(h) * h;
        let (flags, fd, file) = if shared {
            // SAFETY: memfd_create with a static name.
            let fd = unsafe { libc::memfd_create(c"placement".as_ptr(), libc::MFD_CLOEXEC) };
            // SAFETY: a new descriptor owned by the File.
            let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            f.set_len(len as u64).unwrap();
            (libc::MAP_SHARED | libc::MAP_FIXED, f.as_raw_fd(), Some(f))
        } else {
            (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                None,
            )
        };
        // SAFETY: replaces part of our own reservation.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        for i in 0..len / PS {
            fill(addr + i * PS, i);
        }
        Arena {
            addr,
            len,
            _fd: file,
        }
    }

    fn range(&self, huge_index: usize) -> PageRange {
        let h = huge_page_size();
        PageRange::new(self.addr + huge_index * h, self.addr + (huge_index + 1) * h)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

fn fill(page: usize, object: usize) {
    for w in 0..PS / 8 {
        // SAFETY: `page` is a page of a test mapping.
        unsafe { std::ptr::write_volatile((page + w * 8) as *mut u64, pattern(object, w)) };
    }
}

fn pattern(object: usize, word: usize) -> u64 {
    (object as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ word as u64
}

fn intact(page: usize, object: usize) -> bool {
    // SAFETY: `page` is a page of a test mapping.
    (0..PS / 8).all(
        |w| unsafe { std::ptr::read_volatile((page + w * 8) as *const u64) } == pattern(object, w),
    )
}

/// A thread reading one word of each page in a list until it is dropped (also when a test
/// panics: the memory it reads must not be unmapped under it).
struct Toucher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Toucher {
    fn new(pages: Vec<usize>) -> Toucher {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for &p in &pages {
                    // SAFETY: pages of a test mapping that outlives the Toucher.
                    unsafe { std::ptr::read_volatile(p as *const u64) };
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Toucher {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Toucher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn manager(kind: BackendKind) -> kioku_hugepage::ManagerBuilder {
    Manager::builder()
        .backend(kind)
        .period(Duration::from_millis(20))
        .access_options(AccessOptions {
            sample_pages: 1024,
            cpu_budget: 0.0,
            ..AccessOptions::default()
        })
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn hot_range_is_promoted(kind: BackendKind) {
    let shared = kind == BackendKind::Refault;
    let a = Arena::new(4, shared);
    let h = huge_page_size();
    let m = manager(kind).build().unwrap();
    m.register(a.addr as *const u8, a.len, ArenaId(1)).unwrap();
    // Ranges 1 and 2 hot as a whole, 0 and 3 never touched again.
    let hot: Vec<usize> = (a.addr + h..a.addr + 3 * h).step_by(PS).collect();
    let toucher = Toucher::new(hot);
    m.enable().unwrap();
    wait_until("two promotions", Duration::from_secs(30), || {
        if std::env::var_os("PLACEMENT_DEBUG").is_some() {
            eprintln!("{:?}", m.status());
        }
        m.status().promoted_ranges >= 2
    });
    drop(toucher);
    let st = m.status();
    assert_eq!(st.promoted_ranges, 2, "{st:?}");
    let huge: Vec<usize> = (0..4)
        .map(|i| huge_mapped_bytes(a.range(i)).unwrap() / h)
        .collect();
    assert_eq!(huge, [0, 1, 1, 0], "huge pages per range; {st:?}");

    let smaps = smaps_huge(
        std::process::id() as i32,
        PageRange::new(a.addr, a.addr + a.len),
    )
    .unwrap();
    let kib = if shared {
        smaps.shmem_pmd_kib
    } else {
        smaps.anon_huge_kib
    };
    assert!(kib >= 2 * (h as u64 / 1024), "smaps shows {smaps:?}");
    for i in 0..a.len / PS {
        assert!(intact(a.addr + i * PS, i), "page {i} changed");
    }
    eprintln!("{kind:?}: {:?}", st.totals);
}

#[test]
fn a_hot_anonymous_range_is_promoted() {
    hot_range_is_promoted(BackendKind::ProtNone);
}

#[test]
fn a_hot_shared_range_is_promoted() {
    hot_range_is_promoted(BackendKind::Refault);
}

/// Objects are pages; `table[i]` is where object i lives now.
struct Objects {
    table: Vec<AtomicUsize>,
}

#[test]
fn a_scattered_hot_set_is_compacted_and_the_data_stay_byte_identical() {
    let a = Arena::new(4, false);
    let h = huge_page_size();
    let pages = a.len / PS;
    let objects = Arc::new(Objects {
        table: (0..pages)
            .map(|i| AtomicUsize::new(a.addr + i * PS))
            .collect(),
    });
    // Eight hot objects per huge range: far below a quarter, so they are compacted.
    let hot: Vec<usize> = (0..pages).filter(|i| i % 64 == 5).collect();
    let target = Arc::new(Mutex::new((
        HugeMemory::map(HugeKind::ThpAnon, h).unwrap(),
        0usize,
    )));
    let m = manager(BackendKind::ProtNone).build().unwrap();
    m.register(a.addr as *const u8, a.len, ArenaId(7)).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    {
        let (objects, target, calls) = (objects.clone(), target.clone(), calls.clone());
        let base = a.addr;
        m.set_compactor(Box::new(
            move |req: &CompactRequest<'_>, moved: &mut [bool]| {
                assert_eq!(req.arena, ArenaId(7));
                calls.fetch_add(1, Ordering::Relaxed);
                let mut t = target.lock().unwrap();
                for (i, p) in req.pages.iter().enumerate() {
                    let object = (p.addr - base) / PS;
                    let (mem, used) = &mut *t;
                    if *used + PS > mem.len() {
                        break;
                    }
                    let to = mem.as_ptr() as usize + *used;
                    // Readers only read: copy, then publish the new address, then free the old page.
                    // SAFETY: `p.addr` and `to` are distinct pages of live mappings.
                    unsafe {
                        std::ptr::copy_nonoverlapping(p.addr as *const u8, to as *mut u8, PS)
                    };
                    objects.table[object].store(to, Ordering::Release);
                    *used += PS;
                    moved[i] = true;
                }
                Ok(())
            },
        ));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (objects, s, hot) = (objects.clone(), stop.clone(), hot.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for &o in &hot {
                    let at = objects.table[o].load(Ordering::Acquire);
                    // SAFETY: object addresses point into live mappings.
                    unsafe { std::ptr::read_volatile(at as *const u64) };
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Toucher {
            stop: stop.clone(),
            thread: Some(thread),
        }
    };
    m.enable().unwrap();
    wait_until("every hot object moved", Duration::from_secs(30), || {
        hot.iter()
            .all(|&o| objects.table[o].load(Ordering::Acquire) != a.addr + o * PS)
    });
    drop(reader);
    let st = m.status();
    assert_eq!(
        st.promoted_ranges, 0,
        "a scattered hot set was promoted: {st:?}"
    );
    assert!(st.totals.compacted_pages >= hot.len(), "{st:?}");
    assert!(calls.load(Ordering::Relaxed) >= 1);
    let t = target.lock().unwrap();
    let huge = t.0.range();
    assert_eq!(
        huge_mapped_bytes(huge).unwrap(),
        h,
        "the target is not on a huge page"
    );
    for o in 0..pages {
        let at = objects.table[o].load(Ordering::Acquire);
        assert!(
            intact(at, o),
            "object {o} is not byte-identical after the move"
        );
        if hot.contains(&o) {
            assert!(huge.contains(at), "hot object {o} is not on the huge page");
        } else {
            assert_eq!(at, a.addr + o * PS, "cold object {o} was moved");
        }
    }
}

/// A range with fewer populated pages than `min_observed` (a sparse heap, or what a compaction
/// left behind) is still decided: its few hot objects are compacted.
#[test]
fn a_few_hot_objects_in_sparse_memory_are_compacted() {
    let a = Arena::new(2, false);
    let pages = a.len / PS;
    // 32 populated pages per huge range (fewer than the 128 observations a range needs
    // otherwise), 4 of them hot.
    for i in (0..pages).filter(|i| i % 16 != 0) {
        // SAFETY: drops a page of our own private test mapping that holds no object.
        unsafe {
            libc::madvise(
                (a.addr + i * PS) as *mut libc::c_void,
                PS,
                libc::MADV_DONTNEED,
            )
        };
    }
    let hot: Vec<usize> = (0..pages).filter(|i| i % 128 == 0).collect();
    let objects = Arc::new(Objects {
        table: (0..pages)
            .map(|i| AtomicUsize::new(a.addr + i * PS))
            .collect(),
    });
    let target = Arc::new(Mutex::new((
        HugeMemory::map(HugeKind::ThpAnon, huge_page_size()).unwrap(),
        0usize,
    )));
    let m = manager(BackendKind::ProtNone).build().unwrap();
    m.register(a.addr as *const u8, a.len, ArenaId(3)).unwrap();
    {
        let (objects, target, base) = (objects.clone(), target.clone(), a.addr);
        m.set_compactor(Box::new(
            move |req: &CompactRequest<'_>, moved: &mut [bool]| {
                let mut t = target.lock().unwrap();
                for (i, p) in req.pages.iter().enumerate() {
                    let (mem, used) = &mut *t;
                    let to = mem.as_ptr() as usize + *used;
                    // SAFETY: `p.addr` and `to` are distinct pages of live mappings; readers
                    // only read, and see the new address after the copy.
                    unsafe {
                        std::ptr::copy_nonoverlapping(p.addr as *const u8, to as *mut u8, PS)
                    };
                    objects.table[(p.addr - base) / PS].store(to, Ordering::Release);
                    *used += PS;
                    moved[i] = true;
                }
                Ok(())
            },
        ));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (objects, s, hot) = (objects.clone(), stop.clone(), hot.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for &o in &hot {
                    let at = objects.table[o].load(Ordering::Acquire);
                    // SAFETY: object addresses point into live mappings.
                    unsafe { std::ptr::read_volatile(at as *const u64) };
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Toucher {
            stop,
            thread: Some(thread),
        }
    };
    m.enable().unwrap();
    wait_until(
        "the hot objects of sparse ranges moved",
        Duration::from_secs(30),
        || {
            hot.iter()
                .all(|&o| objects.table[o].load(Ordering::Acquire) != a.addr + o * PS)
        },
    );
    drop(reader);
    m.disable().unwrap();
    assert_eq!(m.status().promoted_ranges, 0);
    for &o in &hot {
        assert!(
            intact(objects.table[o].load(Ordering::Acquire), o),
            "object {o}"
        );
    }
}

#[test]
fn tracking_stops_when_placement_settled_and_restarts_on_enable() {
    let a = Arena::new(2, true);
    let h = huge_page_size();
    let m = manager(BackendKind::Refault)
        .settle_rotations(2)
        .build()
        .unwrap();
    m.register(a.addr as *const u8, a.len, ArenaId(0)).unwrap();
    let hot: Vec<usize> = (a.addr..a.addr + h).step_by(PS).collect();
    let toucher = Toucher::new(hot);
    let fd = m.notify_fd();
    // Every route: the callback, the eventfd, the blocking wait.
    let via_callback = Arc::new(AtomicUsize::new(0));
    {
        let c = via_callback.clone();
        m.on_notice(move |_| {
            c.fetch_add(1, Ordering::Relaxed);
        });
    }
    m.enable().unwrap();
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polling one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, 20_000) };
    assert_eq!(ready, 1, "the eventfd never became readable");
    let mut settled = None;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(40) {
        match m.wait(Some(Duration::from_secs(1))) {
            Some(n) if n.settled => {
                settled = Some(n);
                break;
            }
            _ => {}
        }
    }
    let n = settled.expect("placement never settled");
    eprintln!("settled: {n:?} {:?}", m.status());
    assert!(n.generation >= 2, "{n:?}");
    // The callback runs right after the notice is posted.
    wait_until(
        "the callback to see both notices",
        // Soon, unless the machine is loaded.
        Duration::from_secs(30),
        || via_callback.load(Ordering::Relaxed) >= 2,
    );
    let st = m.status();
    assert!(st.settled && st.promoted_ranges == 1, "{st:?}");
    // No scan happens any more.
    let before = m.status().last_scan;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        m.status().last_scan,
        before,
        "the tracker still scans after settling"
    );
    assert_eq!(before.armed, 0, "pages stay armed after settling");
    // enable() restarts tracking.
    m.enable().unwrap();
    wait_until("a scan after restarting", Duration::from_secs(30), || {
        m.status().last_scan != before
    });
    drop(toucher);
    for i in 0..a.len / PS {
        assert!(intact(a.addr + i * PS, i), "page {i} changed");
    }
}

#[test]
fn the_budget_caps_promotions() {
    let a = Arena::new(4, true);
    let m = manager(BackendKind::Refault)
        .policy(Policy {
            budget: Some(2),
            ..Policy::default()
        })
        .settle_rotations(0)
        .build()
        .unwrap();
    m.register(a.addr as *const u8, a.len, ArenaId(0)).unwrap();
    let hot: Vec<usize> = (a.addr..a.addr + a.len).step_by(PS).collect();
    let toucher = Toucher::new(hot);
    m.enable().unwrap();
    let t = Instant::now();
    loop {
        let s = m.status();
        if s.promoted_ranges == 2 && s.totals.over_budget > 0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timed out waiting for the budget to refuse a range: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(toucher);
    let s = m.status();
    assert_eq!(s.promoted_ranges, 2);
    assert_eq!(s.huge_pages_used, 2);
    let huge: usize = (0..4).map(|i| huge_mapped_bytes(a.range(i)).unwrap()).sum();
    assert_eq!(huge, 2 * huge_page_size());
}

#[test]
fn bad_input_gets_one_clear_error_each() {
    let h = huge_page_size();
    // Arenas outlive the manager: tracked memory must not be unmapped while it is tracked.
    let a = Arena::new(1, false);
    let b = Arena::new(1, false);
    let m = manager(BackendKind::ProtNone).build().unwrap();
    // A range that is not mapped.
    // SAFETY: unmapping part of our own arena.
    unsafe { libc::munmap((a.addr + 4 * PS) as *mut libc::c_void, PS) };
    let err = m
        .register(a.addr as *const u8, a.len, ArenaId(0))
        .unwrap_err();
    assert!(err.to_string().contains("not entirely mapped"), "{err}");
    // Overlapping arenas.
    m.register(b.addr as *const u8, b.len, ArenaId(1)).unwrap();
    let err = m
        .register((b.addr + PS) as *const u8, PS, ArenaId(2))
        .unwrap_err();
    assert!(matches!(err, HugeError::Overlap { .. }), "{err}");
    // Unknown arena.
    let err = m.unregister(a.addr as *const u8).unwrap_err();
    assert!(matches!(err, HugeError::NotRegistered { .. }), "{err}");
    // Settings.
    let err = Manager::builder()
        .policy(Policy {
            promote_fraction: 2.0,
            ..Policy::default()
        })
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("promote_fraction"), "{err}");
    assert!(Manager::builder().threshold(0).build().is_err());
    // More hugetlb pages than are free.
    let (free, _) = hugetlb_pages();
    let err = HugeMemory::map(HugeKind::Hugetlb, (free as usize + 1) * h).unwrap_err();
    assert!(matches!(err, HugeError::NoHugetlbPages { .. }), "{err}");
    assert!(err.to_string().contains("vm.nr_hugepages"), "{err}");
    // The manager still works.
    m.enable().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(m.status().error.is_none());
}

/// hugetlb memory works when pages are reserved: the test reserves two more (as root) and gives
/// them back.
#[test]
fn hugetlb_memory_is_backed_by_huge_pages() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("!!!!! SKIPPING hugetlb_memory_is_backed_by_huge_pages: needs root to reserve hugetlb pages !!!!!");
        return;
    }
    let path = "/proc/sys/vm/nr_hugepages";
    let before: u64 = std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(path, (before + 2).to_string()).unwrap();
    let result = std::panic::catch_unwind(|| {
        let (free, _) = hugetlb_pages();
        if free < 2 {
            eprintln!("!!!!! SKIPPING hugetlb check: the kernel found no 2 free huge pages !!!!!");
            return;
        }
        let mem = HugeMemory::map(HugeKind::Hugetlb, 2 * huge_page_size()).unwrap();
        assert_eq!(huge_mapped_bytes(mem.range()).unwrap(), mem.len());
        let s = smaps_huge(std::process::id() as i32, mem.range()).unwrap();
        assert_eq!(s.hugetlb_kib, (mem.len() / 1024) as u64, "{s:?}");
    });
    std::fs::write(path, before.to_string()).unwrap();
    result.unwrap();
}

#[test]
fn thp_memory_kinds_are_huge() {
    for kind in [HugeKind::ThpAnon, HugeKind::ThpShmem] {
        let mem = HugeMemory::map(kind, 3 << 20).unwrap();
        assert_eq!(mem.len(), 2 * huge_page_size());
        assert_eq!(
            huge_mapped_bytes(mem.range()).unwrap(),
            mem.len(),
            "{kind:?}"
        );
    }
}
