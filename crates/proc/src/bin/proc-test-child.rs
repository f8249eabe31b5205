//! Helper process for kioku-proc's tests (not a user tool). Each mode prints deterministic
//! output so that a traced run can be compared with an untraced one.
//!
//! * `work ITERS` — fills a 1 MiB buffer from a PRNG each iteration, prints its checksum.
//! * `fp ITERS` — a floating-point / SSE2 loop; prints the bit patterns of its results.
//! * `threads N ITERS` — N threads doing `work`-like loops; prints each thread's result.
//! * `signals USR1 RT` — counts SIGUSR1 and sums the values of SIGRTMIN signals; prints
//!   `READY <addr of usr1 count> <addr of rt count> <addr of rt sum>`, runs until it has seen
//!   USR1 and RT signals, then prints `DONE usr1 rt sum` and exits with status 7.
//! * `echo` — reads stdin with raw read(2), prints `ECHO <bytes>` per read or `ERR <errno>`.
//! * `sleep MS N` — N relative nanosleeps of MS ms; prints `SLEPT <ms>` or `ERR <errno>`.
//! * `serve` — commands on stdin: `FILL addr len seed` fills memory, `CHECK addr len` prints
//!   its CRC, `EXIT` exits; replies `OK <crc>` / `CRC <crc>`.
//! * `raise SIG` — kills itself with SIG after a little work.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn fill(buf: &mut [u8], seed: u64) {
    let mut s = seed | 1;
    for chunk in buf.chunks_mut(8) {
        let v = xorshift(&mut s).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn fnv(buf: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in buf {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn work(iters: u64) {
    let mut buf = vec![0u8; 1 << 20];
    let mut out = std::io::stdout().lock();
    for i in 0..iters {
        fill(&mut buf, i * 7919 + 1);
        writeln!(out, "{i} {:016x}", fnv(&buf)).unwrap();
        out.flush().unwrap();
    }
}

#[inline(never)]
fn fp_kernel(n: u64, seed: f64) -> (f64, [f64; 2]) {
    use std::arch::x86_64::*;
    let mut x = seed;
    let mut acc = 0.0f64;
    // SAFETY: SSE2 is part of x86-64.
    let mut v = unsafe { _mm_set_pd(seed, 1.0 / seed) };
    // SAFETY: as above.
    let k = unsafe { _mm_set_pd(0.999_999_7, 1.000_000_3) };
    for i in 0..n {
        x = (x * 1.000_000_1 + 0.5).sqrt() + (i as f64).sin() * 1e-3;
        acc += x / (1.0 + (i & 7) as f64);
        // SAFETY: SSE2 arithmetic on registers.
        v = unsafe { _mm_add_pd(_mm_mul_pd(v, k), _mm_set1_pd(1e-9 * x)) };
    }
    let mut o = [0.0f64; 2];
    // SAFETY: `o` holds two f64.
    unsafe { _mm_storeu_pd(o.as_mut_ptr(), v) };
    (acc, o)
}

fn fp(iters: u64) {
    let mut out = std::io::stdout().lock();
    for r in 0..iters {
        let (acc, v) = fp_kernel(200_000, 1.5 + r as f64);
        writeln!(
            out,
            "{r} {:016x} {:016x} {:016x}",
            acc.to_bits(),
            v[0].to_bits(),
            v[1].to_bits()
        )
        .unwrap();
        out.flush().unwrap();
    }
}

fn threads(n: u64, iters: u64) {
    let hs: Vec<_> = (0..n)
        .map(|t| {
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 << 10];
                let mut h = 0u64;
                for i in 0..iters {
                    fill(&mut buf, t * 1_000_003 + i + 1);
                    h ^= fnv(&buf).rotate_left(i as u32 % 64);
                    let (acc, _) = fp_kernel(2000, 1.0 + t as f64);
                    h = h.wrapping_add(acc.to_bits());
                }
                h
            })
        })
        .collect();
    for (t, h) in hs.into_iter().enumerate() {
        println!("thread {t} {:016x}", h.join().unwrap());
    }
}

static USR1: AtomicU64 = AtomicU64::new(0);
static RT_N: AtomicU64 = AtomicU64::new(0);
static RT_SUM: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_usr1(_: libc::c_int) {
    USR1.fetch_add(1, Ordering::SeqCst);
}

extern "C" fn on_rt(_: libc::c_int, si: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; for SI_QUEUE it
    // carries the sigval.
    let v = unsafe { (*si).si_value().sival_ptr as usize as u64 };
    RT_SUM.fetch_add(v, Ordering::SeqCst);
    RT_N.fetch_add(1, Ordering::SeqCst);
}

fn signals(want_usr1: u64, want_rt: u64) {
    // SAFETY: installing async-signal-safe handlers (atomics only).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_rt as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigaction(libc::SIGRTMIN(), &sa, std::ptr::null_mut());
    }
    println!(
        "READY {} {} {}",
        &USR1 as *const _ as usize, &RT_N as *const _ as usize, &RT_SUM as *const _ as usize
    );
    std::io::stdout().flush().unwrap();
    let mut spin = 0u64;
    while USR1.load(Ordering::SeqCst) < want_usr1 || RT_N.load(Ordering::SeqCst) < want_rt {
        for i in 0..10_000u64 {
            spin = spin.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(spin);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    println!(
        "DONE {} {} {}",
        USR1.load(Ordering::SeqCst),
        RT_N.load(Ordering::SeqCst),
        RT_SUM.load(Ordering::SeqCst)
    );
    std::io::stdout().flush().unwrap();
    std::process::exit(7);
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn echo() {
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut buf = [0u8; 256];
    loop {
        // SAFETY: reading into a local buffer.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            println!("EOF");
            return;
        }
        if n < 0 {
            println!("ERR {}", errno());
        } else {
            let s = String::from_utf8_lossy(&buf[..n as usize]);
            println!("ECHO {}", s.trim_end());
        }
        std::io::stdout().flush().unwrap();
    }
}

fn sleep(ms: u64, n: u64) {
    println!("READY");
    std::io::stdout().flush().unwrap();
    for _ in 0..n {
        let ts = libc::timespec {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
        };
        let t0 = std::time::Instant::now();
        // SAFETY: raw nanosleep(2) with a valid timespec; no remainder wanted.
        let r = unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<u8>()) };
        if r != 0 {
            println!("ERR {}", errno());
        } else {
            println!("SLEPT {}", t0.elapsed().as_millis());
        }
        std::io::stdout().flush().unwrap();
    }
}

fn serve() {
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.first().copied() {
            Some("FILL") => {
                let addr: usize = w[1].parse().unwrap();
                let len: usize = w[2].parse().unwrap();
                let seed: u64 = w[3].parse().unwrap();
                // SAFETY: the monitor mapped [addr, addr+len) writable for us.
                let mem = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
                fill(mem, seed);
                writeln!(out, "OK {:016x}", fnv(mem)).unwrap();
            }
            Some("CHECK") => {
                let addr: usize = w[1].parse().unwrap();
                let len: usize = w[2].parse().unwrap();
                // SAFETY: the monitor mapped [addr, addr+len) readable for us.
                let mem = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
                writeln!(out, "CRC {:016x}", fnv(mem)).unwrap();
            }
            Some("EXIT") | None => return,
            Some(other) => panic!("unknown command {other}"),
        }
        out.flush().unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> u64 { args.get(i).and_then(|s| s.parse().ok()).unwrap_or(0) };
    match args.first().map(String::as_str) {
        Some("work") => work(num(1)),
        Some("fp") => fp(num(1)),
        Some("threads") => threads(num(1), num(2)),
        Some("signals") => signals(num(1), num(2)),
        Some("echo") => echo(),
        Some("sleep") => sleep(num(1), num(2)),
        Some("serve") => serve(),
        Some("raise") => {
            work(2);
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(num(1) as i32) };
            std::process::exit(99);
        }
        _ => {
            eprintln!("usage: proc-test-child work|fp|threads|signals|echo|sleep|serve|raise ...");
            std::process::exit(2);
        }
    }
}
