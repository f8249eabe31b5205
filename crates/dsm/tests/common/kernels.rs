//! SPMD kernels with known answers, run on every node of a job, and their serial versions.

use kioku_dsm::{Config, Distribution, Dsm, DsmError};

/// The value, or a panic that shows the error's message.
fn ok<T>(r: kioku_dsm::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

pub fn run(kernel: &str, args: &[u64]) {
    let dsm = match Dsm::init(Config::from_env().unwrap_or_else(|e| panic!("config: {e}"))) {
        Ok(d) => d,
        Err(DsmError::Dismissed) => {
            println!("\nDISMISSED=1");
            return;
        }
        // A standby that took over and then saw the job fail.
        Err(e @ DsmError::Unrecoverable(_)) => fail(e),
        Err(e) => panic!("init: {e}"),
    };
    match kernel {
        "ft_laplace" => ft_laplace(&dsm, args[0] as usize, args[1] as usize, args[2] as usize),
        "ft_histogram" => ft_histogram(&dsm, args[0] as usize, args[1] as u32, args[2] as usize),
        "multi_writer" => multi_writer(&dsm, args[0] as usize, args[1] as usize),
        "laplace" => {
            let h = laplace(&dsm, args[0] as usize, args[1] as usize);
            if dsm.node() == 0 {
                println!("RESULT={h:016x}");
            }
        }
        "matmul" => {
            let h = matmul(&dsm, args[0] as usize);
            if dsm.node() == 0 {
                println!("RESULT={h:016x}");
            }
        }
        "histogram" => {
            let h = histogram(&dsm, args[0] as usize, args[1] as u32);
            if dsm.node() == 0 {
                println!("RESULT={h:016x}");
            }
        }
        "outside" => {
            let p = ok(dsm.alloc(100, Distribution::Block));
            ok(dsm.barrier());
            if dsm.node() == 1 {
                // One page past the allocation.
                // SAFETY: deliberately outside; the DSM must stop the program with a clear error.
                unsafe { p.add(dsm.page_size()).write_volatile(1) };
                println!("NOT STOPPED");
            }
            ok(dsm.barrier());
        }
        "extra_barrier" => {
            // Node 1 calls barrier once more than the others, which finalize meanwhile.
            let r = (|| {
                dsm.barrier()?;
                if dsm.node() == 1 {
                    dsm.barrier()?;
                }
                dsm.barrier()?;
                dsm.finalize()
            })();
            match r {
                Ok(()) => println!("ERROR=none"),
                Err(e) => println!("ERROR={e}"),
            }
            std::process::exit(0);
        }
        "alloc_mismatch" => {
            let bytes = if dsm.node() == 1 { 8192 } else { 4096 };
            match dsm.alloc(bytes, Distribution::Block) {
                Ok(_) => println!("ERROR=none"),
                Err(e) => println!("ERROR={e}"),
            }
            std::process::exit(0);
        }
        "checkpoint" => checkpoint(&dsm, args[0] as usize, args[1] as usize),
        "rollback" => rollback(&dsm, args[0] as usize),
        "start_only" => {}
        k => panic!("unknown kernel {k}"),
    }
    dsm.finalize().unwrap_or_else(|e| panic!("finalize: {e}"));
}

/// Every node writes its own bytes (interleaved byte by byte) and its own 8-byte words of the
/// same pages, several rounds; after each barrier every node checks every byte.
fn multi_writer(dsm: &Dsm, pages: usize, rounds: usize) {
    let n = dsm.nodes() as usize;
    let me = dsm.node() as usize;
    let bytes = pages * dsm.page_size();
    let bp = ok(dsm.alloc(bytes, Distribution::Cyclic));
    let words = ok(dsm.alloc(bytes, Distribution::Block)) as *mut u64;
    let nw = bytes / 8;
    let byte_at = |i: usize, r: usize| (i.wrapping_mul(31) + r * 7 + 1) as u8;
    for r in 0..rounds {
        for i in (me..bytes).step_by(n) {
            // SAFETY: inside the allocation.
            unsafe { bp.add(i).write(byte_at(i, r)) };
        }
        for w in (me..nw).step_by(n) {
            // Read-modify-write: the value must be the one merged at the last barrier.
            // SAFETY: inside the allocation.
            unsafe { words.add(w).write(words.add(w).read() + (w as u64 + 1)) };
        }
        ok(dsm.barrier());
        for i in 0..bytes {
            // SAFETY: inside the allocation.
            let got = unsafe { bp.add(i).read() };
            assert_eq!(got, byte_at(i, r), "node {me} round {r} byte {i}");
        }
        for w in 0..nw {
            // SAFETY: inside the allocation.
            let got = unsafe { words.add(w).read() };
            assert_eq!(
                got,
                (r as u64 + 1) * (w as u64 + 1),
                "node {me} round {r} word {w}"
            );
        }
        ok(dsm.barrier());
    }
    println!("CHECKED={}", rounds * (bytes + nw));
}

/// The seed's 2-D Laplace: Jacobi on a `size` × `size` grid, top edge held at 1.0, `iters`
/// sweeps; rows of the interior split in blocks. The FNV hash of the final grid.
pub fn laplace(dsm: &Dsm, size: usize, iters: usize) -> u64 {
    let n = dsm.nodes() as usize;
    let me = dsm.node() as usize;
    let cells = size * size;
    let a = ok(dsm.alloc(cells * 8, Distribution::Block)) as *mut f64;
    let b = ok(dsm.alloc(cells * 8, Distribution::Block)) as *mut f64;
    let (lo, hi) = rows_of(size, n, me);
    if me == 0 {
        for j in 0..size {
            // SAFETY: inside the allocations.
            unsafe {
                a.add(j).write(1.0);
                b.add(j).write(1.0);
            }
        }
    }
    ok(dsm.barrier());
    let (mut u, mut v) = (a, b);
    for _ in 0..iters {
        for i in lo..hi {
            for j in 1..size - 1 {
                // SAFETY: i and j are interior, so every neighbour is inside the grid.
                unsafe {
                    let x = 0.25
                        * (u.add((i - 1) * size + j).read()
                            + u.add((i + 1) * size + j).read()
                            + u.add(i * size + j - 1).read()
                            + u.add(i * size + j + 1).read());
                    v.add(i * size + j).write(x);
                }
            }
        }
        ok(dsm.barrier());
        std::mem::swap(&mut u, &mut v);
    }
    let h = if me == 0 {
        // SAFETY: the whole grid, after the last barrier.
        let s = unsafe { std::slice::from_raw_parts(u as *const u8, cells * 8) };
        super::fnv(s)
    } else {
        0
    };
    ok(dsm.barrier());
    h
}

/// The Laplace of `laplace`, fault-tolerant: a checkpoint (its private state: the sweep
/// count) after the set-up and every `every` sweeps. A node lost anywhere is replaced by a
/// standby, every node goes back to the newest checkpoint and goes on; the result must be the
/// failure-free one. Prints `RESULT` (whoever is node 0 at the end), `RECOVERIES`, or the
/// `ERROR` that stopped the job. With `every` 0 the checkpoints are the library's, every
/// `KIOKU_DSM_CHECKPOINT_EVERY` barriers.
fn ft_laplace(dsm: &Dsm, size: usize, iters: usize, every: usize) {
    let cells = size * size;
    let a = ok(dsm.alloc(cells * 8, Distribution::Block)) as *mut f64;
    let b = ok(dsm.alloc(cells * 8, Distribution::Block)) as *mut f64;
    let mut recoveries = 0;
    let decode = |p: Vec<u8>| u64::from_le_bytes(p.try_into().unwrap()) as usize;
    let mut it = match dsm.take_resume() {
        Some((_, p)) => {
            recoveries += 1;
            decode(p)
        }
        None => {
            if dsm.node() == 0 {
                for j in 0..size {
                    // SAFETY: inside the allocations.
                    unsafe {
                        a.add(j).write(1.0);
                        b.add(j).write(1.0);
                    }
                }
            }
            let set_up = dsm
                .barrier()
                .and_then(|()| dsm.checkpoint(&0u64.to_le_bytes()));
            match set_up {
                Ok(_) => 0,
                Err(DsmError::RolledBack { .. }) => {
                    recoveries += 1;
                    decode(dsm.take_resume().unwrap().1)
                }
                Err(e) => fail(e),
            }
        }
    };
    let run = |it: &mut usize| -> kioku_dsm::Result<u64> {
        let n = dsm.nodes() as usize;
        while *it < iters {
            let me = dsm.node() as usize;
            let (lo, hi) = rows_of(size, n, me);
            let (u, v) = if (*it).is_multiple_of(2) {
                (a, b)
            } else {
                (b, a)
            };
            for i in lo..hi {
                for j in 1..size - 1 {
                    // SAFETY: i and j are interior, so every neighbour is inside the grid.
                    unsafe {
                        let x = 0.25
                            * (u.add((i - 1) * size + j).read()
                                + u.add((i + 1) * size + j).read()
                                + u.add(i * size + j - 1).read()
                                + u.add(i * size + j + 1).read());
                        v.add(i * size + j).write(x);
                    }
                }
            }
            if every == 0 {
                // Checkpoints every KIOKU_DSM_CHECKPOINT_EVERY barriers carry this.
                dsm.set_private(&(*it as u64 + 1).to_le_bytes())?;
            }
            dsm.barrier()?;
            *it += 1;
            if every > 0 && (*it).is_multiple_of(every) {
                dsm.checkpoint(&(*it as u64).to_le_bytes())?;
            }
        }
        let u = if iters.is_multiple_of(2) { a } else { b };
        let h = if dsm.node() == 0 {
            // SAFETY: the whole grid, after the last barrier.
            let s = unsafe { std::slice::from_raw_parts(u as *const u8, cells * 8) };
            super::fnv(s)
        } else {
            0
        };
        // The hash counts only if no node was lost while node 0 read the grid.
        dsm.barrier()?;
        Ok(h)
    };
    let h = loop {
        match run(&mut it) {
            Ok(h) => break h,
            Err(DsmError::RolledBack { epoch }) => {
                recoveries += 1;
                let (e, p) = dsm
                    .take_resume()
                    .expect("a rollback leaves the state to resume");
                assert_eq!(e, epoch);
                it = decode(p);
                println!("\nRESUMED_AT={it}");
            }
            Err(e) => fail(e),
        }
    };
    if dsm.node() == 0 {
        println!("\nRESULT={h:016x}");
    }
    println!("\nRECOVERIES={recoveries}");
}

/// Prints the error that stopped the job and exits (the test looks at every node's).
fn fail(e: DsmError) -> ! {
    println!("\nERROR={e}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(3)
}

/// Interior rows 1..size-1 in blocks.
fn rows_of(size: usize, n: usize, me: usize) -> (usize, usize) {
    let rows = size - 2;
    (1 + rows * me / n, 1 + rows * (me + 1) / n)
}

pub fn laplace_serial(size: usize, iters: usize) -> u64 {
    let mut u = vec![0.0f64; size * size];
    for x in u.iter_mut().take(size) {
        *x = 1.0;
    }
    let mut v = u.clone();
    for _ in 0..iters {
        for i in 1..size - 1 {
            for j in 1..size - 1 {
                v[i * size + j] = 0.25
                    * (u[(i - 1) * size + j]
                        + u[(i + 1) * size + j]
                        + u[i * size + j - 1]
                        + u[i * size + j + 1]);
            }
        }
        std::mem::swap(&mut u, &mut v);
    }
    let bytes: Vec<u8> = u.iter().flat_map(|x| x.to_le_bytes()).collect();
    super::fnv(&bytes)
}

fn mat_a(i: usize, j: usize) -> f64 {
    ((i * 7 + j * 3) % 17) as f64 * 0.5 - 3.0
}

fn mat_b(i: usize, j: usize) -> f64 {
    ((i * 5 + j * 11) % 13) as f64 * 0.25 + 1.0
}

/// C = A·B, `m` × `m`; node k computes a block of C's *columns*, so every page of C (a row
/// holds all column blocks) has every node as a writer. The FNV hash of C.
pub fn matmul(dsm: &Dsm, m: usize) -> u64 {
    let n = dsm.nodes() as usize;
    let me = dsm.node() as usize;
    let a = ok(dsm.alloc(m * m * 8, Distribution::Block)) as *mut f64;
    let b = ok(dsm.alloc(m * m * 8, Distribution::Cyclic)) as *mut f64;
    let c = ok(dsm.alloc(m * m * 8, Distribution::Block)) as *mut f64;
    // Node k fills rows of A and B in blocks too: the inputs are written by several nodes.
    let (r0, r1) = (m * me / n, m * (me + 1) / n);
    for i in r0..r1 {
        for j in 0..m {
            // SAFETY: inside the allocations.
            unsafe {
                a.add(i * m + j).write(mat_a(i, j));
                b.add(i * m + j).write(mat_b(i, j));
            }
        }
    }
    ok(dsm.barrier());
    let (c0, c1) = (m * me / n, m * (me + 1) / n);
    for i in 0..m {
        for j in c0..c1 {
            let mut s = 0.0;
            for k in 0..m {
                // SAFETY: inside the allocations.
                s += unsafe { a.add(i * m + k).read() * b.add(k * m + j).read() };
            }
            // SAFETY: inside the allocation.
            unsafe { c.add(i * m + j).write(s) };
        }
    }
    ok(dsm.barrier());
    let h = if me == 0 {
        // SAFETY: all of C, after the barrier.
        super::fnv(unsafe { std::slice::from_raw_parts(c as *const u8, m * m * 8) })
    } else {
        0
    };
    ok(dsm.barrier());
    h
}

pub fn matmul_serial(m: usize) -> u64 {
    let mut c = vec![0.0f64; m * m];
    for i in 0..m {
        for j in 0..m {
            let mut s = 0.0;
            for k in 0..m {
                s += mat_a(i, k) * mat_b(k, j);
            }
            c[i * m + j] = s;
        }
    }
    let bytes: Vec<u8> = c.iter().flat_map(|x| x.to_le_bytes()).collect();
    super::fnv(&bytes)
}

fn sample(i: u64) -> usize {
    // A fixed pseudo-random stream (splitmix64).
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as usize
}

const BINS: usize = 2048;

/// A parallel histogram: `samples` values, each node a block of them, added into 2048 shared
/// bins (4 pages) under `locks` locks (bins split among them), in batches. Many writers per
/// page, synchronised only by locks until the final barrier.
pub fn histogram(dsm: &Dsm, samples: usize, locks: u32) -> u64 {
    let n = dsm.nodes() as usize;
    let me = dsm.node() as usize;
    let bins = ok(dsm.alloc(BINS * 8, Distribution::Cyclic)) as *mut u64;
    let (s0, s1) = (samples * me / n, samples * (me + 1) / n);
    let per_lock = BINS / locks as usize;
    let mut local = vec![0u64; BINS];
    let flush = |local: &mut Vec<u64>| {
        for l in 0..locks as usize {
            ok(dsm.lock(l as u32));
            for (k, x) in local
                .iter_mut()
                .enumerate()
                .skip(l * per_lock)
                .take(per_lock)
            {
                if *x != 0 {
                    // SAFETY: inside the allocation, under the lock of this bin.
                    unsafe { bins.add(k).write(bins.add(k).read() + *x) };
                    *x = 0;
                }
            }
            ok(dsm.unlock(l as u32));
        }
    };
    for (done, i) in (s0..s1).enumerate() {
        local[sample(i as u64) % BINS] += 1;
        if done % 5000 == 4999 {
            flush(&mut local);
        }
    }
    flush(&mut local);
    ok(dsm.barrier());
    let h = if me == 0 {
        // SAFETY: all bins, after the barrier.
        let all = unsafe { std::slice::from_raw_parts(bins as *const u8, BINS * 8) };
        let total: u64 = (0..BINS).map(|k| unsafe { bins.add(k).read() }).sum();
        assert_eq!(total as usize, samples, "every sample counted once");
        super::fnv(all)
    } else {
        0
    };
    ok(dsm.barrier());
    h
}

/// The histogram of `histogram`, fault-tolerant: each node's samples in `batches` batches,
/// each added into the shared bins under the locks, then a barrier and a checkpoint (its
/// private state: the batch number). Prints `RESULT` (node 0 at the end) and `RECOVERIES`.
fn ft_histogram(dsm: &Dsm, samples: usize, locks: u32, batches: usize) {
    let bins = ok(dsm.alloc(BINS * 8, Distribution::Cyclic)) as *mut u64;
    let per_lock = BINS / locks as usize;
    let decode = |p: Vec<u8>| u64::from_le_bytes(p.try_into().unwrap()) as usize;
    let mut recoveries = 0;
    let mut b = match dsm.take_resume() {
        Some((_, p)) => {
            recoveries += 1;
            decode(p)
        }
        None => match dsm.checkpoint(&0u64.to_le_bytes()) {
            Ok(_) => 0,
            Err(e) => fail(e),
        },
    };
    let run = |b: &mut usize| -> kioku_dsm::Result<u64> {
        while *b < batches {
            let (n, me) = (dsm.nodes() as usize, dsm.node() as usize);
            let (s0, s1) = (samples * me / n, samples * (me + 1) / n);
            let len = s1 - s0;
            let mut local = vec![0u64; BINS];
            for i in s0 + len * *b / batches..s0 + len * (*b + 1) / batches {
                local[sample(i as u64) % BINS] += 1;
            }
            for l in 0..locks {
                dsm.lock(l)?;
                let range = l as usize * per_lock..(l as usize + 1) * per_lock;
                for k in range.filter(|&k| local[k] != 0) {
                    // SAFETY: inside the allocation, under the lock of this bin.
                    unsafe { bins.add(k).write(bins.add(k).read() + local[k]) };
                }
                dsm.unlock(l)?;
            }
            dsm.barrier()?;
            *b += 1;
            dsm.checkpoint(&(*b as u64).to_le_bytes())?;
        }
        let h = if dsm.node() == 0 {
            // SAFETY: all bins, after the barrier.
            let all = unsafe { std::slice::from_raw_parts(bins as *const u8, BINS * 8) };
            super::fnv(all)
        } else {
            0
        };
        dsm.barrier()?;
        Ok(h)
    };
    let h = loop {
        match run(&mut b) {
            Ok(h) => break h,
            Err(DsmError::RolledBack { .. }) => {
                recoveries += 1;
                b = decode(dsm.take_resume().expect("a state to resume").1);
            }
            Err(e) => fail(e),
        }
    };
    if dsm.node() == 0 {
        println!("\nRESULT={h:016x}");
    }
    println!("\nRECOVERIES={recoveries}");
}

pub fn histogram_serial(samples: usize) -> u64 {
    let mut bins = vec![0u64; BINS];
    for i in 0..samples {
        bins[sample(i as u64) % BINS] += 1;
    }
    let bytes: Vec<u8> = bins.iter().flat_map(|x| x.to_le_bytes()).collect();
    super::fnv(&bytes)
}

/// `kib` KiB of shared memory per node (Block), written by every node (so diffs reach every
/// home), then checkpointed; `rounds` times. Prints the images each node holds and the time of
/// the last checkpoint.
fn checkpoint(dsm: &Dsm, kib: usize, rounds: usize) {
    let n = dsm.nodes() as usize;
    let me = dsm.node() as usize;
    let words = kib * 1024 * n / 8;
    let p = ok(dsm.alloc(words * 8, Distribution::Block)) as *mut u64;
    let mut last = std::time::Duration::ZERO;
    for r in 0..rounds {
        for w in (me..words).step_by(n * 97) {
            // SAFETY: inside the allocation.
            unsafe { p.add(w).write((r * 1000 + w) as u64) };
        }
        let t = std::time::Instant::now();
        let private = format!("node {me} round {r}");
        ok(dsm.checkpoint(private.as_bytes()));
        last = t.elapsed();
    }
    let (own, held) = dsm.images();
    let show = |v: &[kioku_dsm::HeldImage]| {
        v.iter()
            .map(|i| format!("{}:{}:{}:{:08x}", i.node, i.epoch, i.bytes, i.crc))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("\nOWN={}", show(&own));
    println!("HELD={}", show(&held));
    println!("CKPT_US={}", last.as_micros());
}

/// Writes pattern 1 (every node a share of every page), checkpoints, writes pattern 2 and
/// allocates more, rolls back: every node must read pattern 1 everywhere and zero in the newer
/// allocation, and get its private state back; then normal work goes on (pattern 3).
fn rollback(dsm: &Dsm, pages: usize) {
    let n = dsm.nodes() as usize;
    let me = dsm.node() as usize;
    let words = pages * dsm.page_size() / 8;
    let p = ok(dsm.alloc(words * 8, Distribution::Cyclic)) as *mut u64;
    let fill = |pattern: u64| {
        for w in (me..words).step_by(n) {
            // SAFETY: inside the allocation.
            unsafe { p.add(w).write(pattern * 1_000_000 + w as u64) };
        }
    };
    let expect = |pattern: u64| {
        for w in 0..words {
            // SAFETY: inside the allocation.
            let got = unsafe { p.add(w).read() };
            assert_eq!(
                got,
                pattern * 1_000_000 + w as u64,
                "node {me} word {w} pattern {pattern}"
            );
        }
    };
    fill(1);
    let epoch = ok(dsm.checkpoint(format!("private of {me}").as_bytes()));
    fill(2);
    ok(dsm.barrier());
    expect(2);
    let q = ok(dsm.alloc(4096, Distribution::OnNode(0))) as *mut u64;
    // SAFETY: inside the allocation.
    unsafe { q.write(77) };
    fill(2); // writes not yet released are discarded too
    let (back, private) = ok(dsm.rollback());
    assert_eq!(back, epoch);
    assert_eq!(private, format!("private of {me}").into_bytes());
    expect(1);
    // SAFETY: inside the allocation.
    assert_eq!(
        unsafe { q.read() },
        0,
        "allocated after the checkpoint: zero again"
    );
    // Homes see the next writes as soon as their writers release them: everyone checks first.
    ok(dsm.barrier());
    fill(3);
    ok(dsm.barrier());
    expect(3);
    println!("\nROLLED_BACK={back}");
}
