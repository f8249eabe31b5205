//! Benchmark of kioku-track: cost of one scan of a 1 GiB range with 0 %, 1 % and 100 % of its
//! pages written, for the userfaultfd + PAGEMAP_SCAN backend, the mprotect backend and a baseline
//! that compares every page against a snapshot copy; plus the cost of the first write to a
//! protected page beside an ordinary write. Prints a Markdown report on stdout.
//!
//! Usage: `track-bench [--mib N] [--reps N]` (defaults: 1024 MiB, 7 repetitions).

use std::time::{Duration, Instant};

use kioku_track::{page_size, probe, BackendKind, PageRange, PageTracker, Tracker};

struct Region {
    addr: usize,
    len: usize,
}

impl Region {
    fn new(len: usize, populate: bool) -> Region {
        // SAFETY: fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of {len} bytes failed");
        let r = Region {
            addr: p as usize,
            len,
        };
        if populate {
            for i in 0..r.pages() {
                r.bump(i);
            }
        }
        r
    }

    fn pages(&self) -> usize {
        self.len / page_size()
    }

    fn range(&self) -> PageRange {
        PageRange::new(self.addr, self.addr + self.len)
    }

    /// Changes the page's first word (every call makes it differ from any earlier snapshot).
    fn bump(&self, i: usize) {
        let p = (self.addr + i * page_size()) as *mut u64;
        // SAFETY: page i lies inside the mapping, which is readable and writable (or tracked,
        // in which case the write fault is resolved by the tracker).
        unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p).wrapping_add(1)) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Page indices written in repetition `rep` for `percent` % of `pages`.
fn pattern(pages: usize, percent: u32, rep: u64) -> Vec<usize> {
    match percent {
        0 => Vec::new(),
        100 => (0..pages).collect(),
        p => (0..pages)
            .filter(|&i| splitmix(rep << 40 ^ i as u64) % 100 < p as u64)
            .collect(),
    }
}

fn ranges_of(region: &Region, idx: &[usize]) -> Vec<PageRange> {
    let ps = page_size();
    let mut out: Vec<PageRange> = Vec::new();
    for &i in idx {
        let a = region.addr + i * ps;
        match out.last_mut() {
            Some(last) if last.end == a => last.end = a + ps,
            _ => out.push(PageRange::new(a, a + ps)),
        }
    }
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1.0 {
        format!("{:.0} ns", us * 1000.0)
    } else if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

/// Scans with a tracker backend; returns median scan time and median time of the writes.
fn bench_tracker(
    kind: BackendKind,
    len: usize,
    percent: u32,
    reps: usize,
) -> (Duration, Duration, usize) {
    let region = Region::new(len, true);
    let mut t = Tracker::builder().backend(kind).build().expect("tracker");
    t.track(region.range()).expect("track");
    let mut out = Vec::new();
    t.scan_into(&mut out).expect("scan");
    assert!(out.is_empty());
    let (mut scans, mut writes) = (Vec::new(), Vec::new());
    let mut pages = 0;
    for rep in 0..reps {
        let idx = pattern(region.pages(), percent, rep as u64);
        let w0 = Instant::now();
        for &i in &idx {
            region.bump(i);
        }
        writes.push(w0.elapsed());
        let s0 = Instant::now();
        let stats = t.scan_into(&mut out).expect("scan");
        scans.push(s0.elapsed());
        assert_eq!(
            out,
            ranges_of(&region, &idx),
            "{kind:?} found a different page set at {percent}% rep {rep}"
        );
        pages = stats.pages;
    }
    drop(t);
    (median(scans), median(writes), pages)
}

/// The baseline: compare every page with a snapshot copy and refresh the copy where different.
fn bench_memcmp(len: usize, percent: u32, reps: usize) -> (Duration, usize) {
    let region = Region::new(len, true);
    let ps = page_size();
    // SAFETY: the region is mapped and populated; we only read it here.
    let live = unsafe { std::slice::from_raw_parts(region.addr as *const u8, len) };
    let mut snap = live.to_vec();
    let mut out: Vec<PageRange> = Vec::new();
    let mut scans = Vec::new();
    for rep in 0..reps {
        let idx = pattern(region.pages(), percent, rep as u64);
        for &i in &idx {
            region.bump(i);
        }
        let s0 = Instant::now();
        out.clear();
        for (i, (a, b)) in live
            .chunks_exact(ps)
            .zip(snap.chunks_exact_mut(ps))
            .enumerate()
        {
            if a != b {
                b.copy_from_slice(a);
                let start = region.addr + i * ps;
                match out.last_mut() {
                    Some(last) if last.end == start => last.end = start + ps,
                    _ => out.push(PageRange::new(start, start + ps)),
                }
            }
        }
        scans.push(s0.elapsed());
        assert_eq!(
            out,
            ranges_of(&region, &idx),
            "memcmp baseline found a different page set at {percent}% rep {rep}"
        );
    }
    (median(scans), idx_len(region.pages(), percent))
}

fn idx_len(pages: usize, percent: u32) -> usize {
    pattern(pages, percent, 0).len()
}

/// Clean scan of a never-touched (sparse) range.
fn bench_sparse(kind: BackendKind, len: usize, reps: usize) -> Duration {
    let region = Region::new(len, false);
    let mut t = Tracker::builder().backend(kind).build().expect("tracker");
    t.track(region.range()).expect("track");
    let mut out = Vec::new();
    let mut scans = Vec::new();
    for _ in 0..reps {
        let s0 = Instant::now();
        t.scan_into(&mut out).expect("scan");
        scans.push(s0.elapsed());
        assert!(out.is_empty());
    }
    median(scans)
}

/// Per-page cost of the first write to a protected page and of an ordinary write.
fn bench_first_write(kind: Option<BackendKind>, pages: usize, reps: usize) -> Duration {
    let region = Region::new(pages * page_size(), true);
    let mut t = kind.map(|k| {
        let mut t = Tracker::builder().backend(k).build().expect("tracker");
        t.track(region.range()).expect("track");
        t
    });
    let mut out = Vec::new();
    let mut per_write = Vec::new();
    for _ in 0..reps {
        if let Some(t) = t.as_mut() {
            t.scan_into(&mut out).expect("scan");
        }
        let s0 = Instant::now();
        for i in 0..pages {
            region.bump(i);
        }
        per_write.push(s0.elapsed() / pages as u32);
    }
    if let Some(t) = t.as_mut() {
        t.scan_into(&mut out).expect("scan");
        assert_eq!(out, vec![region.range()]);
    }
    median(per_write)
}

fn main() {
    let mut mib = 1024usize;
    let mut reps = 7usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--mib" => mib = it.next().and_then(|v| v.parse().ok()).expect("--mib N"),
            "--reps" => reps = it.next().and_then(|v| v.parse().ok()).expect("--reps N"),
            _ => {
                eprintln!("usage: track-bench [--mib N] [--reps N]");
                std::process::exit(2);
            }
        }
    }
    let len = mib << 20;
    let uffd = match probe().uffd {
        Ok(_) => true,
        Err(e) => {
            eprintln!("!!!!! userfaultfd backend unavailable, not measured: {e}");
            false
        }
    };
    let started = Instant::now();
    let mut rows = Vec::new();
    for percent in [0u32, 1, 100] {
        // 100 % needs one fault per page per repetition: fewer repetitions; 0 % is cheap: more.
        let r = match percent {
            0 => reps * 5,
            100 => reps.min(3),
            _ => reps,
        };
        let (u, uw) = if uffd {
            eprintln!("uffd {percent}% ...");
            let (s, w, _) = bench_tracker(BackendKind::UffdPagemapScan, len, percent, r);
            (fmt(s), fmt(w))
        } else {
            ("n/a".into(), "n/a".into())
        };
        eprintln!("mprotect {percent}% ...");
        let (m, mw, pages) = bench_tracker(BackendKind::Mprotect, len, percent, r);
        let (m, mw) = (fmt(m), fmt(mw));
        eprintln!("memcmp {percent}% ...");
        let (c, _) = bench_memcmp(len, percent, reps.min(3));
        let c = fmt(c);
        rows.push(format!(
            "| {percent} % ({pages} pages) | {u} | {m} | {c} | {uw} | {mw} |"
        ));
    }
    let sparse_u = if uffd {
        fmt(bench_sparse(BackendKind::UffdPagemapScan, len, reps * 5))
    } else {
        "n/a".into()
    };
    let sparse_m = fmt(bench_sparse(BackendKind::Mprotect, len, reps * 5));
    let fw_pages = 16384;
    let plain = bench_first_write(None, fw_pages, reps);
    let fw_u = if uffd {
        fmt(bench_first_write(
            Some(BackendKind::UffdPagemapScan),
            fw_pages,
            reps,
        ))
    } else {
        "n/a".into()
    };
    let fw_m = fmt(bench_first_write(
        Some(BackendKind::Mprotect),
        fw_pages,
        reps,
    ));

    println!("Scan of one {mib} MiB range of populated anonymous 4 KiB pages (median of {} runs for 0 % and the sparse range, {reps} for 1 %, 3 for 100 % and for memcmp); every method's page set is asserted equal to the written pattern.", reps * 5);
    println!();
    println!("| pages written since last scan | uffd + PAGEMAP_SCAN | mprotect + SIGSEGV | memcmp vs snapshot | writing them, uffd | writing them, mprotect |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    println!("| 0 % of a never-touched (sparse) range | {sparse_u} | {sparse_m} | — | — | — |");
    println!();
    println!("Cost per page of a write ({fw_pages} pages, one 8-byte write each, median of {reps} runs):");
    println!();
    println!("| ordinary write (page already writable) | first write after scan, uffd (async WP fault) | first write after scan, mprotect (SIGSEGV + mprotect) |");
    println!("|---|---|---|");
    println!("| {} | {fw_u} | {fw_m} |", fmt(plain));
    eprintln!("total bench time {:?}", started.elapsed());
}
