//! The seed's micro-benchmark (HPS §6.3), and the tracker's cost. Run by `bench/hugepage/run.sh`.
//!
//! `hugepage-bench workload --mode M --pattern P [--size BYTES] [--rounds N] [--sets 16]`
//! allocates `size` bytes of 4 KiB objects and, per round, accesses `sets` times every object
//! of the pattern once (`seq`: all in order; `random`: all in a random order; `skewed`: a fixed
//! random third in a random order). An access reads one 64-byte line of the object and writes
//! one word of it. Objects are reached through a table (object → address), the same in every
//! mode, so that kioku can move them. Modes:
//!
//! * `default`: anonymous memory, `MADV_NOHUGEPAGE` (THP never for it);
//! * `default-shm`: a memfd mapping (the refault backend's baseline);
//! * `thp`: anonymous memory, `MADV_HUGEPAGE` (THP always for it: huge pages at first touch);
//! * `kioku-protnone`, `kioku-refault`: the manager samples, promotes and compacts (protection
//!   probe on anonymous memory, refault probe on a memfd); compaction moves hot objects onto
//!   THP memory at set boundaries (the program's safe points);
//! * `track-protnone`, `track-refault`: sampling only, no placement (the tracker's overhead).
//!
//! Prints one JSON object per round and per memory sample on stdout.
//!
//! `hugepage-bench cost --backend B --size BYTES --sample PAGES --scans N` measures the
//! tracker's work per scan on populated, idle memory (the cost that does not depend on what
//! the program does), and per rotation (every page observed once).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kioku_hugepage::{
    huge_page_size, smaps_huge, AccessOptions, ArenaId, BackendKind, CompactRequest, HugeKind,
    HugeMemory, Manager, PageRange,
};
use kioku_track::{AccessTracker, PageTracker};

const PS: usize = 4096;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sarg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn shuffle(&mut self, v: &mut [u32]) {
        for i in (1..v.len()).rev() {
            v.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

/// The object arena: anonymous or a memfd, 2 MiB aligned.
struct Arena {
    addr: usize,
    len: usize,
    memfd: Option<OwnedFd>,
}

impl Arena {
    fn new(len: usize, shared: bool) -> Arena {
        let h = huge_page_size();
        // SAFETY: a fresh reservation; an aligned window of it is replaced below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + h,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(raw, libc::MAP_FAILED);
        let addr = (raw as usize).div_ceil(h) * h;
        let memfd = shared.then(|| {
            // SAFETY: memfd_create with a static name.
            let fd = unsafe { libc::memfd_create(c"hugepage-bench".as_ptr(), libc::MFD_CLOEXEC) };
            assert!(fd >= 0);
            // SAFETY: a new descriptor, owned from here on; sized to `len`.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: sizing our own memfd.
            assert_eq!(
                unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) },
                0
            );
            fd
        });
        let (flags, fd) = match &memfd {
            Some(f) => (libc::MAP_SHARED | libc::MAP_FIXED, f.as_raw_fd()),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
            ),
        };
        // SAFETY: replaces an aligned window of our own reservation.
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
        Arena { addr, len, memfd }
    }

    fn advise(&self, advice: libc::c_int) {
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(self.addr as *mut libc::c_void, self.len, advice) };
    }

    /// Frees the memory of the object page at `addr` (after it moved away).
    fn release(&self, addr: usize) {
        match &self.memfd {
            Some(fd) => {
                // SAFETY: punching a hole in our own memfd at the page's offset; the page holds
                // no live object any more.
                unsafe {
                    libc::fallocate(
                        fd.as_raw_fd(),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        (addr - self.addr) as libc::off_t,
                        PS as libc::off_t,
                    )
                };
            }
            None => {
                // SAFETY: dropping a page of our own private mapping that holds no live object.
                unsafe { libc::madvise(addr as *mut libc::c_void, PS, libc::MADV_DONTNEED) };
            }
        }
    }

    /// Bytes of the memfd in memory (its pages count whether mapped or not).
    fn memfd_bytes(&self) -> u64 {
        let Some(fd) = &self.memfd else { return 0 };
        // SAFETY: a zeroed stat is a valid buffer for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat of our own descriptor.
        unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
        st.st_blocks as u64 * 512
    }
}

/// Physical memory of this process: anonymous and file RSS, plus the arena memfd's pages
/// (counted whether mapped or not: the refault probe unmaps sampled pages without freeing them).
fn memory_kib(arena: &Arena) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let shm_of_others = 0;
    field("RssAnon:") + field("RssFile:") + shm_of_others + arena.memfd_bytes() / 1024
}

/// Moves decided by the compaction callback, applied by the workload between sets.
struct Moves {
    queue: VecDeque<(u32, usize)>,
    targets: Vec<HugeMemory>,
    used: usize,
}

impl Moves {
    fn destination(&mut self) -> Option<usize> {
        let chunk = 32 << 20;
        if self.targets.last().is_none_or(|t| self.used + PS > t.len()) {
            match HugeMemory::map(HugeKind::ThpAnon, chunk) {
                Ok(m) => {
                    self.targets.push(m);
                    self.used = 0;
                }
                Err(e) => {
                    eprintln!("hugepage-bench: no huge memory for compaction: {e}");
                    return None;
                }
            }
        }
        let t = self.targets.last().expect("just ensured");
        let at = t.as_ptr() as usize + self.used;
        self.used += PS;
        Some(at)
    }
}

fn workload(args: &[String]) {
    let mode = sarg(args, "--mode", "default");
    let pattern = sarg(args, "--pattern", "random");
    let size: usize = arg(args, "--size", 1 << 30);
    let rounds: usize = arg(args, "--rounds", 80);
    let sets: usize = arg(args, "--sets", 16);
    let period_ms: u64 = arg(args, "--period-ms", 100);
    let objects = size / PS;
    let shared = mode.ends_with("refault") || mode == "default-shm";
    let arena = Arc::new(Arena::new(size, shared));
    match mode.as_str() {
        "thp" => arena.advise(libc::MADV_HUGEPAGE),
        "default" | "default-shm" | "kioku-protnone" | "track-protnone" | "kioku-refault"
        | "track-refault" => arena.advise(libc::MADV_NOHUGEPAGE),
        other => panic!("unknown mode {other}"),
    }
    let table: Vec<usize> = (0..objects).map(|i| arena.addr + i * PS).collect();
    let table = Arc::new(Mutex::new(table));
    let mut rng = Rng(0x5eed);
    // The pattern's objects.
    let mut order: Vec<u32> = match pattern.as_str() {
        "seq" | "random" => (0..objects as u32).collect(),
        "skewed" => {
            let mut all: Vec<u32> = (0..objects as u32).collect();
            rng.shuffle(&mut all);
            all.truncate(objects / 3);
            all
        }
        other => panic!("unknown pattern {other}"),
    };
    // Every object of the pattern is populated before the first round (written once), as the
    // seed's benchmark does by touching the range; untouched objects stay unpopulated.
    {
        let t = table.lock().unwrap();
        for &o in &order {
            // SAFETY: the object's page lies in the arena.
            unsafe { std::ptr::write_volatile(t[o as usize] as *mut u64, o as u64) };
        }
    }
    let moves = Arc::new(Mutex::new(Moves {
        queue: VecDeque::new(),
        targets: Vec::new(),
        used: 0,
    }));
    let manager = if mode.starts_with("kioku") || mode.starts_with("track") {
        let backend = if mode.ends_with("refault") {
            BackendKind::Refault
        } else {
            BackendKind::ProtNone
        };
        let m = Manager::builder()
            .backend(backend)
            .period(Duration::from_millis(period_ms))
            .auto_place(mode.starts_with("kioku"))
            .access_options(AccessOptions {
                cpu_budget: arg(args, "--cpu-budget", 0.01),
                ..AccessOptions::default()
            })
            .build()
            .expect("manager");
        m.register(arena.addr as *const u8, arena.len, ArenaId(0))
            .expect("register the arena");
        let (moves, base) = (moves.clone(), arena.addr);
        m.set_compactor(Box::new(
            move |req: &CompactRequest<'_>, moved: &mut [bool]| {
                let mut mv = moves.lock().unwrap();
                for (i, p) in req.pages.iter().enumerate().take(req.allowance_pages) {
                    let Some(to) = mv.destination() else { break };
                    mv.queue.push_back((((p.addr - base) / PS) as u32, to));
                    moved[i] = true;
                }
                Ok(())
            },
        ));
        m.enable().expect("enable");
        Some(m)
    } else {
        None
    };
    // Memory sampler.
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let sampler = {
        let (stop, arena) = (stop.clone(), arena.clone());
        let (mode, pattern) = (mode.clone(), pattern.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let huge = smaps_huge(
                    std::process::id() as i32,
                    PageRange::new(0, usize::MAX & !(PS - 1)),
                )
                .map(|s| s.huge_kib())
                .unwrap_or(0);
                println!(
                    "{{\"kind\":\"mem\",\"mode\":\"{mode}\",\"pattern\":\"{pattern}\",\"t\":{:.3},\"mem_kib\":{},\"huge_kib\":{huge}}}",
                    start.elapsed().as_secs_f64(),
                    memory_kib(&arena)
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let mut sum = 0u64;
    for round in 0..rounds {
        let t0 = Instant::now();
        for _ in 0..sets {
            if pattern != "seq" {
                rng.shuffle(&mut order);
            }
            let mut t = table.lock().unwrap();
            // Safe point: apply the moves the compaction callback decided.
            {
                let mut mv = moves.lock().unwrap();
                while let Some((o, to)) = mv.queue.pop_front() {
                    let from = t[o as usize];
                    // SAFETY: `from` is the object's page in the arena, `to` a page of huge
                    // memory no object uses; no other thread accesses objects.
                    unsafe { std::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, PS) };
                    t[o as usize] = to;
                    if arena.addr <= from && from < arena.addr + arena.len {
                        arena.release(from);
                    }
                }
            }
            for &o in &order {
                let p = t[o as usize];
                // SAFETY: every table entry points at a live object page.
                unsafe {
                    let line = p as *const u64;
                    for w in 0..8 {
                        sum = sum.wrapping_add(std::ptr::read_volatile(line.add(w)));
                    }
                    std::ptr::write_volatile((p + 8) as *mut u64, sum);
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let bytes = (sets * order.len() * PS) as f64;
        let status = manager.as_ref().map(|m| m.status());
        let (promoted, compacted, work_us, sample) = status
            .as_ref()
            .map(|s| {
                (
                    s.promoted_ranges,
                    s.totals.compacted_pages,
                    s.last_scan.work.as_micros(),
                    // 0 once sampling stopped (settled).
                    if s.settled {
                        0
                    } else {
                        s.last_scan.sample_pages
                    },
                )
            })
            .unwrap_or((0, 0, 0, 0));
        println!(
            "{{\"kind\":\"round\",\"mode\":\"{mode}\",\"pattern\":\"{pattern}\",\"round\":{round},\"t\":{:.3},\"secs\":{secs:.6},\"mib_s\":{:.1},\"mem_kib\":{},\"promoted\":{promoted},\"compacted\":{compacted},\"scan_work_us\":{work_us},\"sample\":{sample},\"settled\":{}}}",
            start.elapsed().as_secs_f64(),
            bytes / secs / (1 << 20) as f64,
            memory_kib(&arena),
            status.as_ref().is_some_and(|s| s.settled),
        );
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    if let Some(m) = &manager {
        let s = m.status();
        println!(
            "{{\"kind\":\"summary\",\"mode\":\"{mode}\",\"pattern\":\"{pattern}\",\"promoted\":{},\"collapse_ms\":{:.3},\"compacted\":{},\"offered\":{},\"no_huge_page\":{},\"over_budget\":{},\"settled\":{},\"backend\":\"{:?}\"}}",
            s.promoted_ranges,
            s.totals.collapse_time.as_secs_f64() * 1e3,
            s.totals.compacted_pages,
            s.totals.offered_pages,
            s.totals.no_huge_page,
            s.totals.over_budget,
            s.settled,
            s.backend,
        );
    }
    std::hint::black_box(sum);
}

fn cost(args: &[String]) {
    let backend = sarg(args, "--backend", "refault");
    let size: usize = arg(args, "--size", 1 << 30);
    let sample: usize = arg(args, "--sample", 4096);
    let scans: usize = arg(args, "--scans", size / PS / sample.max(1) + 4);
    let shared = backend == "refault";
    let arena = Arena::new(size, shared);
    arena.advise(libc::MADV_NOHUGEPAGE);
    for p in (arena.addr..arena.addr + size).step_by(PS) {
        // SAFETY: pages of our arena.
        unsafe { std::ptr::write_volatile(p as *mut u8, 1) };
    }
    let kind = if shared {
        BackendKind::Refault
    } else {
        BackendKind::ProtNone
    };
    let mut t = AccessTracker::builder()
        .backend(kind)
        .options(AccessOptions {
            sample_pages: sample,
            cpu_budget: 0.0,
            ..AccessOptions::default()
        })
        .build()
        .expect("tracker");
    let t0 = Instant::now();
    t.track(PageRange::new(arena.addr, arena.addr + size))
        .expect("track");
    let track_us = t0.elapsed().as_micros();
    // The first rotation observes every page once: its scans are the steady per-scan cost, their
    // sum the cost of one full pass. (The refault probe leaves idle pages unmapped afterwards,
    // so later rotations of idle memory would observe nothing.)
    let mut out = Vec::new();
    let mut works = Vec::new();
    let mut pass = Duration::ZERO;
    let mut first = true;
    for _ in 0..scans {
        t.scan_into(&mut out).expect("scan");
        let s = t.last_scan();
        if first {
            // The first scan only arms (and lists the candidates): counted in the pass.
            pass += s.work;
            first = false;
            continue;
        }
        pass += s.work;
        works.push(s.work.as_secs_f64() * 1e6);
        if s.rotations >= 1 {
            break;
        }
    }
    let s = t.last_scan();
    works.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = works[works.len() / 2];
    println!(
        "{{\"kind\":\"cost\",\"backend\":\"{backend}\",\"gib\":{:.3},\"sample\":{sample},\"track_us\":{track_us},\"scan_median_us\":{median:.1},\"rotation_scans\":{},\"rotation_ms\":{:.3}}}",
        size as f64 / (1u64 << 30) as f64,
        s.rotation_scans,
        pass.as_secs_f64() * 1e3,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("workload") => workload(&args[1..]),
        Some("cost") => cost(&args[1..]),
        _ => {
            eprintln!("usage: hugepage-bench workload --mode M --pattern P [--size B] [--rounds N] [--sets N] | cost --backend refault|protnone --size B --sample PAGES --scans N");
            std::process::exit(2);
        }
    }
}
