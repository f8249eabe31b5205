//! The sampling budget follows placement: at the default budget (1 % of a CPU) a large hot set
//! is placed within seconds of appearing — the manager samples faster while placement converges
//! — and sampling drops back to the steady budget (or stops, once settled) afterwards.
//!
//! At a constant 1 % a rotation over these hot sets takes 10–20 s and a page must be seen hot
//! twice, so without the faster convergence both tests miss their deadlines several times over.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kioku_hugepage::{huge_page_size, ArenaId, BackendKind, CompactRequest, Manager};

const PS: usize = 4096;

/// A shared mapping of `huge` huge pages of a memfd (2 MiB aligned) with every third page
/// populated: the hot objects, as in the skewed benchmark. Unmapped on drop.
struct Sparse {
    addr: usize,
    len: usize,
    fd: std::fs::File,
}

impl Sparse {
    fn new(huge: usize) -> Sparse {
        let h = huge_page_size();
        let len = huge * h;
        // SAFETY: a fresh reservation, an aligned window of which is replaced below.
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
        assert_ne!(raw, libc::MAP_FAILED as usize);
        let addr = raw.div_ceil(h) * h;
        // SAFETY: memfd_create with a static name.
        let fd = unsafe { libc::memfd_create(c"converge".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor, owned by the File from here on.
        let fd = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        fd.set_len(len as u64).unwrap();
        // SAFETY: replaces an aligned window of our own reservation.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let s = Sparse { addr, len, fd };
        for &p in &s.hot() {
            // SAFETY: a page of the mapping.
            unsafe { std::ptr::write_volatile(p as *mut u64, p as u64) };
        }
        s
    }

    fn hot(&self) -> Vec<usize> {
        (self.addr..self.addr + self.len).step_by(3 * PS).collect()
    }

    /// Frees a page whose object moved away.
    fn release(&self, page: usize) {
        // SAFETY: punching one page of our own memfd that holds no live object any more.
        let rc = unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (page - self.addr) as libc::off_t,
                PS as libc::off_t,
            )
        };
        assert_eq!(rc, 0);
    }
}

impl Drop for Sparse {
    fn drop(&mut self) {
        // SAFETY: our own mapping; the touching threads were joined before.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// A thread reading every page of `hot` not marked moved, every 20 ms, until dropped.
struct Toucher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Toucher {
    fn new(hot: Vec<usize>, moved: Arc<Vec<AtomicBool>>) -> Toucher {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for (i, &p) in hot.iter().enumerate() {
                    if !moved[i].load(Ordering::Acquire) {
                        // SAFETY: a page of a mapping that outlives the Toucher.
                        unsafe { std::ptr::read_volatile(p as *const u64) };
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
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

/// Default sampling options (1 % CPU budget, 100 ms period): only the backend is chosen.
fn manager() -> kioku_hugepage::ManagerBuilder {
    Manager::builder().backend(BackendKind::Refault)
}

#[test]
fn a_hot_set_is_placed_within_seconds_at_the_default_budget_and_sampling_stops_after() {
    // 384 MiB, 32,768 hot pages: a rotation at a constant 1 % takes about 11 s, and a page is
    // compacted after its second hot observation (about 22 s).
    let a = Sparse::new(192);
    let hot = a.hot();
    let index: std::collections::HashMap<usize, usize> =
        hot.iter().enumerate().map(|(i, &p)| (p, i)).collect();
    let moved: Arc<Vec<AtomicBool>> =
        Arc::new(hot.iter().map(|_| AtomicBool::new(false)).collect());
    let n_moved = Arc::new(AtomicUsize::new(0));
    let m = manager().build().unwrap();
    m.register(a.addr as *const u8, a.len, ArenaId(1)).unwrap();
    let a = Arc::new(a);
    {
        // The "move": the object is no longer read at its old page, which is freed. (Moving
        // data byte-identically is tested in placement.rs; this test is about timing.)
        let (moved, n_moved, a) = (moved.clone(), n_moved.clone(), a.clone());
        m.set_compactor(Box::new(
            move |req: &CompactRequest<'_>, out: &mut [bool]| {
                for (i, p) in req.pages.iter().enumerate() {
                    let Some(&o) = index.get(&p.addr) else {
                        continue;
                    };
                    if !moved[o].swap(true, Ordering::AcqRel) {
                        n_moved.fetch_add(1, Ordering::Relaxed);
                    }
                    a.release(p.addr);
                    out[i] = true;
                }
                Ok(())
            },
        ));
    }
    let toucher = Toucher::new(hot.clone(), moved.clone());
    let t0 = Instant::now();
    m.enable().unwrap();
    let deadline = Duration::from_secs(12);
    while n_moved.load(Ordering::Relaxed) < hot.len() {
        assert!(
            t0.elapsed() < deadline,
            "only {} of {} hot pages placed after {deadline:?}: {:?}",
            n_moved.load(Ordering::Relaxed),
            hot.len(),
            m.status()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let placed = t0.elapsed();
    // Placement settles, and then nothing is sampled at all.
    while !m.status().settled {
        assert!(
            t0.elapsed() < placed + Duration::from_secs(10),
            "never settled: {:?}",
            m.status()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = m.status().last_scan;
    std::thread::sleep(Duration::from_millis(300));
    let st = m.status();
    assert_eq!(
        st.last_scan, before,
        "still sampling after settling: {st:?}"
    );
    assert_eq!(before.armed, 0, "pages stay armed after settling");
    eprintln!(
        "placed {} pages in {placed:?}, settled after {:?}",
        hot.len(),
        t0.elapsed()
    );
    drop(toucher);
}

#[test]
fn without_placement_sampling_drops_back_to_the_steady_budget() {
    // 128 MiB, 10,923 hot pages, found by sampling only (the application places).
    let a = Sparse::new(64);
    let hot = a.hot();
    let none_moved = Arc::new(hot.iter().map(|_| AtomicBool::new(false)).collect());
    let toucher = Toucher::new(hot.clone(), none_moved);
    let m = manager().auto_place(false).build().unwrap();
    m.register(a.addr as *const u8, a.len, ArenaId(1)).unwrap();
    let t0 = Instant::now();
    m.enable().unwrap();
    // Found fast: at a constant 1 % this takes about 8 s.
    let deadline = Duration::from_secs(6);
    while m.status().hot_pages < hot.len() * 9 / 10 {
        assert!(
            t0.elapsed() < deadline,
            "hot set not found after {deadline:?}: {:?}",
            m.status()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("found in {:?}", t0.elapsed());
    // Then the cost per period falls back to the steady 1 % (the sample adapts to it within a
    // few scans; 2 % allows for a loaded machine's noise).
    let period = Duration::from_millis(100).as_secs_f64();
    let mut last = m.status().last_scan;
    let mut window: Vec<(Instant, f64)> = Vec::new();
    let mut peak = 0usize;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let s = m.status().last_scan;
        if s != last {
            last = s;
            peak = peak.max(s.sample_pages);
            window.push((Instant::now(), (s.work + s.faults).as_secs_f64() / period));
            window.retain(|(t, _)| t.elapsed() < Duration::from_secs(3));
        }
        let mean = window.iter().map(|(_, c)| c).sum::<f64>() / window.len().max(1) as f64;
        if window.len() >= 15 && mean <= 0.02 {
            eprintln!(
                "steady after {:?}: {:.2} % of a CPU, sample {} pages (peak {peak})",
                t0.elapsed(),
                mean * 100.0,
                s.sample_pages
            );
            assert!(
                s.sample_pages * 3 < peak,
                "the sample did not shrink after converging: {s:?}, peak {peak}"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "sampling still costs {:.1} % of a CPU per period after {:?}: {s:?}",
            mean * 100.0,
            t0.elapsed()
        );
    }
    drop(toucher);
}
