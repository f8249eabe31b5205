//! `make demo` (until process checkpoints land): a pool surviving SIGKILL.
//!
//! A child process opens the pool and commits as fast as it can. It keeps two contexts, as
//! kioku's checkpoints do: each commit writes a 1 MiB image into the context the live commit
//! does not use, persists it, and commits roots naming that context, its counter and its
//! checksum. The parent kills the child with SIGKILL at a random moment, reopens the pool and
//! verifies that the recovered state is the last commit the child reported (or the one it was
//! finishing), byte for byte. Run it again and it resumes from the pool it left.
//!
//! Usage: crash_demo [--pool PATH] [--rounds N]

use kioku_pool::{CreateOptions, OpenOptions, Pool};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KIND: &str = "kioku.demo";
const IMAGE: u64 = 1 << 20;

fn image_byte(counter: u64, i: u64) -> u8 {
    (counter.wrapping_mul(2654435761).wrapping_add(i * 31) >> 3) as u8
}

/// The child: commit forever, telling the parent each committed counter.
fn child(path: &Path) -> ! {
    let mut pool = Pool::open(
        path,
        &OpenOptions {
            kind: Some(KIND.into()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("child: {e}"));
    for ctx in ["ctx0", "ctx1"] {
        if pool.section(ctx).is_none() {
            pool.create_section(ctx, IMAGE, 0).unwrap();
        }
    }
    let (mut counter, mut live_ctx) = match pool.roots() {
        [c, x, _] => (*c, *x),
        _ => (0, 1),
    };
    let out = std::io::stdout();
    loop {
        counter += 1;
        let ctx = 1 - live_ctx;
        let s = pool.section(&format!("ctx{ctx}")).unwrap().clone();
        let img = pool.bytes_mut(s.offset, IMAGE);
        for (i, b) in img.iter_mut().enumerate() {
            *b = image_byte(counter, i as u64);
        }
        let sum = crc32c::crc32c(img) as u64;
        pool.persist(s.offset, IMAGE).unwrap();
        pool.commit(&[counter, ctx, sum]).unwrap();
        live_ctx = ctx;
        let _ = writeln!(out.lock(), "{counter}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args[i + 1].clone())
    };
    let path = get("--pool")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".kioku/demo.pool"));
    if args.iter().any(|a| a == "--child") {
        child(&path);
    }
    let rounds: u32 = get("--rounds").map_or(3, |r| r.parse().expect("--rounds N"));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).expect("create pool directory");
    }
    if path.exists() {
        let pool = Pool::open(
            &path,
            &OpenOptions {
                kind: Some(KIND.into()),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| fail(&e.to_string()));
        println!(
            "pool {} exists: resuming from epoch {} (counter {:?})",
            path.display(),
            pool.epoch(),
            pool.roots().first()
        );
    } else {
        let pool =
            Pool::create(&path, &CreateOptions::new(KIND)).unwrap_or_else(|e| fail(&e.to_string()));
        println!(
            "created pool {} on medium {} ({})",
            path.display(),
            pool.medium().kind(),
            pool.medium().kind().durability()
        );
    }
    for round in 1..=rounds {
        let mut kid = Command::new(std::env::current_exe().unwrap())
            .args(["--child", "--pool"])
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start child");
        let mut lines = BufReader::new(kid.stdout.take().unwrap()).lines();
        let first: u64 = lines
            .next()
            .and_then(|l| l.ok())
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| fail("child made no commit"));
        let run_for = Duration::from_millis(150 + (rand::random::<u64>() % 350));
        let start = Instant::now();
        let mut last = first;
        // Read acknowledgements until the deadline, then kill without warning.
        while start.elapsed() < run_for {
            match lines.next() {
                Some(Ok(l)) => last = l.parse().unwrap(),
                _ => fail("child died on its own"),
            }
        }
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(kid.id() as i32, libc::SIGKILL) };
        let status = kid.wait().unwrap();
        let t = Instant::now();
        let pool = Pool::open(
            &path,
            &OpenOptions {
                kind: Some(KIND.into()),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| fail(&format!("reopen after SIGKILL: {e}")));
        let [counter, ctx, sum] = *pool.roots() else {
            fail("roots missing")
        };
        let s = pool.section(&format!("ctx{ctx}")).unwrap();
        let img = pool.bytes(s.offset, IMAGE);
        let ok_sum = crc32c::crc32c(img) as u64 == sum;
        let ok_bytes = img
            .iter()
            .enumerate()
            .all(|(i, &b)| b == image_byte(counter, i as u64));
        let ok_counter = counter == last || counter == last + 1;
        println!(
            "round {round}: {} commits of 1 MiB in {:?}, child killed ({status}); last acknowledged {last}, recovered {counter} (epoch {}) in {:?}: {}",
            last - first + 1,
            run_for,
            pool.epoch(),
            t.elapsed(),
            if ok_sum && ok_bytes && ok_counter { "image verified" } else { "MISMATCH" }
        );
        if !(ok_sum && ok_bytes && ok_counter) {
            fail("recovered state is not the last commit");
        }
    }
    println!("\n$ kioku pool inspect {}", path.display());
    println!("{}", kioku_pool::inspect::inspect(&path).expect("inspect"));
}

fn fail(msg: &str) -> ! {
    eprintln!("crash_demo: {msg}");
    std::process::exit(1)
}
