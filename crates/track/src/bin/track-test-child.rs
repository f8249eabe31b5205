//! Helper process for kioku-track's tests (not a user tool).
//!
//! `track-test-child serve PAGES [--self-register] [--thp]`: maps PAGES anonymous pages, creates a
//! userfaultfd (and, with `--self-register`, does the handshake and registers the range itself),
//! prints `READY <pid> <uffd> <addr> <len>` and then obeys stdin lines:
//! `W i j ...` writes one byte to each page index, `R i j ...` reads them, `CLOSE` closes its
//! userfaultfd, `EXEC` replaces the process image with `sleep 30`, `EXIT` exits. Each command is acknowledged with `OK`.
//!
//! `track-test-child hot PAGES PATTERN SEED`: maps PAGES pages of a memfd (shared), fills them,
//! prints `READY <pid> <addr> <len>` and `HOT i j ...` (the page indices of its hot set), then
//! touches the hot set as `PATTERN` says (`sequential`, `random`, `skewed`) until stdin closes.
//!
//! `track-test-child backend`: prints the backend `Tracker::new()` selects (honours
//! `KIOKU_TRACKER`).
//!
//! `track-test-child segv-default` / `segv-chain`: checks that the mprotect backend passes faults
//! outside its ranges on (to the default action, or to a handler installed before it that exits
//! with status 42).

use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;

use kioku_track::{uffd, BackendKind, PageRange, PageTracker, Tracker};

fn map(len: usize, align: usize) -> usize {
    // SAFETY: anonymous private mapping; we only use the returned address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + align,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap failed");
    let p = p as usize;
    if align > 1 {
        (p + align - 1) & !(align - 1)
    } else {
        p
    }
}

fn serve(args: &[String]) {
    let pages: usize = args
        .first()
        .and_then(|s| s.parse().ok())
        .expect("usage: serve PAGES");
    let self_register = args.iter().any(|a| a == "--self-register");
    let thp = args.iter().any(|a| a == "--thp");
    let ps = kioku_track::page_size();
    let len = pages * ps;
    let addr = map(len, if thp { 2 << 20 } else { 1 });
    if thp {
        // SAFETY: advising our own mapping.
        unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        for p in (addr..addr + len).step_by(ps) {
            // SAFETY: p lies inside our mapping.
            unsafe { std::ptr::write_volatile(p as *mut u8, 1) };
        }
    }
    let (fd, _) = uffd::create().expect("userfaultfd");
    if self_register {
        let support = uffd::probe_support().expect("uffd support");
        uffd::handshake(
            fd.as_raw_fd(),
            uffd::REQUIRED_FEATURES | (uffd::OPTIONAL_FEATURES & support.features),
        )
        .expect("UFFDIO_API");
        let r = PageRange::new(addr, addr + len);
        uffd::register_wp(fd.as_raw_fd(), r).expect("UFFDIO_REGISTER");
        uffd::write_protect(fd.as_raw_fd(), r, true).expect("UFFDIO_WRITEPROTECT");
    }
    let mut fd = Some(fd);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "READY {} {} {} {}",
        std::process::id(),
        fd.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1),
        addr,
        len
    )
    .unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let mut words = line.split_whitespace();
        match words.next() {
            Some("W") => {
                for i in words.map(|w| w.parse::<usize>().unwrap()) {
                    assert!(i < pages);
                    // SAFETY: page i lies inside our mapping.
                    unsafe { std::ptr::write_volatile((addr + i * ps) as *mut u8, 0xA5) };
                }
            }
            Some("R") => {
                for i in words.map(|w| w.parse::<usize>().unwrap()) {
                    assert!(i < pages);
                    // SAFETY: page i lies inside our mapping.
                    unsafe { std::ptr::read_volatile((addr + i * ps) as *const u8) };
                }
            }
            Some("CLOSE") => drop(fd.take()),
            Some("EXEC") => {
                // Acknowledge, then become a process that just sleeps (same pid, new mm).
                writeln!(out, "OK").unwrap();
                out.flush().unwrap();
                let err = std::os::unix::process::CommandExt::exec(
                    std::process::Command::new("sleep").arg("30"),
                );
                panic!("exec failed: {err}");
            }
            Some("EXIT") | None => return,
            Some(other) => panic!("unknown command {other}"),
        }
        writeln!(out, "OK").unwrap();
        out.flush().unwrap();
    }
}

/// A small deterministic generator (xorshift64*), the same as the accuracy tests use.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn hot(args: &[String]) {
    let pages: usize = args[0].parse().expect("PAGES");
    let pattern = args[1].as_str();
    let seed: u64 = args[2].parse().expect("SEED");
    let ps = kioku_track::page_size();
    let len = pages * ps;
    // SAFETY: memfd_create with a static name.
    let fd = unsafe { libc::memfd_create(c"hot".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: sizing our own memfd.
    assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
    // SAFETY: a fresh shared mapping of our memfd.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let addr = p as usize;
    for i in 0..pages {
        // SAFETY: page i lies inside our mapping.
        unsafe { std::ptr::write_volatile((addr + i * ps) as *mut u8, 1) };
    }
    let mut rng = Rng(seed | 1);
    let mut hot: Vec<usize> = match pattern {
        "sequential" => (pages / 3..2 * pages / 3).collect(),
        _ => {
            let mut all: Vec<usize> = (0..pages).collect();
            for i in (1..all.len()).rev() {
                all.swap(i, rng.next() as usize % (i + 1));
            }
            all.truncate(pages / 3);
            all.sort_unstable();
            all
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {} {} {}", std::process::id(), addr, len).unwrap();
    let list: Vec<String> = hot.iter().map(|i| i.to_string()).collect();
    writeln!(out, "HOT {}", list.join(" ")).unwrap();
    out.flush().unwrap();
    drop(out);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = std::io::stdin().read_line(&mut sink);
        s2.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let mut round = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        round += 1;
        if pattern != "sequential" {
            for i in (1..hot.len()).rev() {
                hot.swap(i, rng.next() as usize % (i + 1));
            }
        }
        for &i in &hot {
            // SAFETY: page i lies inside our mapping.
            unsafe { std::ptr::read_volatile((addr + i * ps) as *const u8) };
        }
        if pattern == "skewed" && round.is_multiple_of(8) {
            for _ in 0..pages / 1000 {
                let i = rng.next() as usize % pages;
                // SAFETY: page i lies inside our mapping.
                unsafe { std::ptr::read_volatile((addr + i * ps) as *const u8) };
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

extern "C" fn exit42(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) };
}

fn segv(chain_to_own_handler: bool) {
    if chain_to_own_handler {
        // SAFETY: installing a plain SA_SIGINFO handler for SIGSEGV.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = exit42 as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        }
    }
    let ps = kioku_track::page_size();
    let addr = map(2 * ps, 1);
    let mut t = Tracker::builder()
        .backend(BackendKind::Mprotect)
        .build()
        .expect("mprotect tracker");
    t.track(PageRange::new(addr, addr + ps)).expect("track");
    // SAFETY: first page is ours and tracked: the handler makes it writable.
    unsafe { std::ptr::write_volatile(addr as *mut u8, 7) };
    let dirty = t.scan().expect("scan");
    assert_eq!(dirty, vec![PageRange::new(addr, addr + ps)]);
    println!("TRACKED-WRITE-OK");
    std::io::stdout().flush().unwrap();
    // SAFETY: making our own second page read-only.
    unsafe { libc::mprotect((addr + ps) as *mut libc::c_void, ps, libc::PROT_READ) };
    // SAFETY: deliberately faulting on a read-only page outside any tracked range.
    unsafe { std::ptr::write_volatile((addr + ps) as *mut u8, 7) };
    println!("NOT-REACHED");
    std::process::exit(3);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("hot") => hot(&args[1..]),
        Some("try-remote") => {
            let pid: i32 = args[1].parse().expect("PID");
            match kioku_track::AccessTracker::builder().process(pid).build() {
                Ok(_) => println!("BUILT"),
                Err(e) => println!("ERROR {e}"),
            }
        }
        Some("segv-default") => segv(false),
        Some("segv-chain") => segv(true),
        Some("backend") => match Tracker::new() {
            Ok(t) => println!("BACKEND {:?}", t.backend()),
            Err(e) => {
                println!("ERROR {e}");
                std::process::exit(1);
            }
        },
        _ => {
            eprintln!("usage: track-test-child serve PAGES [--self-register] [--thp] | hot PAGES PATTERN SEED | backend | segv-default | segv-chain");
            std::process::exit(2);
        }
    }
}
