//! Throughput benchmark of kioku-ec beside the reed-solomon-simd crate and a plain memory
//! read of the same bytes (bench/ec/run.sh runs it with the C benchmark of ISA-L and
//! Jerasure and writes the table). One line per measurement:
//!   codec op k m size best_GBps median_GBps
//! GB/s counts data bytes (k * size) per operation. For delta updates the operation is
//! "bring parity up to date after p% of one shard changed", so its GB/s compare directly
//! with a re-encode of the stripe.
//!
//! Usage: cargo bench -p kioku-ec --bench ec_bench -- [--points 8,2:10,4] [--sizes 4096,65536]
//!        [--min-time 0.2] [--reps 5] [--no-delta]

use kioku_ec::{Codec, Engine};
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::time::Instant;

struct Opts {
    points: Vec<(usize, usize)>,
    sizes: Vec<usize>,
    min_time: f64,
    reps: usize,
    delta: bool,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        points: vec![(8, 2), (10, 4), (32, 2), (200, 56)],
        sizes: vec![4096, 65536, 1 << 20],
        min_time: 0.2,
        reps: 5,
        delta: true,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let val = || args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--points" => {
                o.points = val()
                    .split(':')
                    .map(|p| {
                        let (k, m) = p.split_once(',').expect("--points k,m:k,m");
                        (k.parse().expect("k"), m.parse().expect("m"))
                    })
                    .collect();
                i += 1;
            }
            "--sizes" => {
                o.sizes = val().split(',').map(|s| s.parse().expect("size")).collect();
                i += 1;
            }
            "--min-time" => {
                o.min_time = val().parse().expect("seconds");
                i += 1;
            }
            "--reps" => {
                o.reps = val().parse().expect("reps");
                i += 1;
            }
            "--no-delta" => o.delta = false,
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
        i += 1;
    }
    o
}

/// One measured operation: its codec and operation names and the work to repeat.
type Job<'a> = (String, String, Box<dyn FnMut() + 'a>);

/// Runs every job for at least `min_time` seconds per round, `reps` rounds, interleaving
/// the jobs so that load from other processes spreads over all of them; prints each job's
/// best and median GB/s.
fn run_jobs(o: &Opts, k: usize, m: usize, size: usize, bytes: usize, mut jobs: Vec<Job<'_>>) {
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); jobs.len()];
    for j in jobs.iter_mut() {
        (j.2)();
    }
    for _ in 0..o.reps {
        for (j, r) in jobs.iter_mut().zip(res.iter_mut()) {
            let t0 = Instant::now();
            let mut it = 0u64;
            loop {
                (j.2)();
                it += 1;
                let t = t0.elapsed().as_secs_f64();
                if t >= o.min_time {
                    r.push(it as f64 * bytes as f64 / t / 1e9);
                    break;
                }
            }
        }
    }
    for (j, mut r) in jobs.into_iter().zip(res) {
        r.sort_by(|a, b| a.total_cmp(b));
        emit(&j.0, &j.1, k, m, size, (r[r.len() - 1], r[r.len() / 2]));
    }
}

fn job<'a>(c: &str, op: &str, f: Box<dyn FnMut() + 'a>) -> Job<'a> {
    (c.to_string(), op.to_string(), f)
}

fn emit(codec: &str, op: &str, k: usize, m: usize, size: usize, (best, med): (f64, f64)) {
    println!("{codec} {op} {k} {m} {size} {best:.4} {med:.4}");
}

/// A zeroed byte buffer starting on a 64-byte boundary, as the C benchmark allocates them.
#[derive(Clone)]
struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let buf = vec![0u8; len + 64];
        let off = buf.as_ptr().align_offset(64);
        Aligned { buf, off, len }
    }
    fn from_slice(s: &[u8]) -> Aligned {
        let mut a = Aligned::new(s.len());
        a.copy_from_slice(s);
        a
    }
}

impl std::ops::Deref for Aligned {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

fn aligned_set(n: usize, size: usize) -> Vec<Aligned> {
    (0..n).map(|_| Aligned::new(size)).collect()
}

/// A plain read of every byte of `bufs`, as fast as this CPU reads.
fn read_all(bufs: &[Aligned]) -> u64 {
    let mut acc = 0u64;
    for b in bufs {
        acc ^= read_one(b);
    }
    acc
}

#[cfg(target_arch = "x86_64")]
fn read_one(b: &[u8]) -> u64 {
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return unsafe { read_avx2(b) };
    }
    read_portable(b)
}

#[cfg(not(target_arch = "x86_64"))]
fn read_one(b: &[u8]) -> u64 {
    read_portable(b)
}

fn read_portable(b: &[u8]) -> u64 {
    b.chunks_exact(8).fold(0u64, |a, c| {
        a ^ u64::from_le_bytes(c.try_into().expect("8"))
    })
}

/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn read_avx2(b: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let mut a = [_mm256_setzero_si256(); 4];
    let mut p = b.as_ptr();
    let end = b.as_ptr().add(b.len() & !127);
    while p < end {
        for (t, acc) in a.iter_mut().enumerate() {
            *acc = _mm256_xor_si256(*acc, _mm256_loadu_si256(p.add(32 * t) as *const __m256i));
        }
        p = p.add(128);
    }
    let x = _mm256_xor_si256(_mm256_xor_si256(a[0], a[1]), _mm256_xor_si256(a[2], a[3]));
    let mut out = [0u64; 4];
    _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, x);
    out[0] ^ out[1] ^ out[2] ^ out[3]
}

fn main() {
    let o = parse_opts();
    eprintln!("kioku-ec engines available: {:?}", Engine::available());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    for &(k, m) in &o.points {
        for &size in &o.sizes {
            let data: Vec<Aligned> = (0..k)
                .map(|_| {
                    let mut v = Aligned::new(size);
                    rng.fill(&mut v[..]);
                    v
                })
                .collect();
            let bytes = k * size;
            let dref: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let reference = Codec::new(k, m).expect("codec");
            let good_parity: Vec<Aligned> = reference
                .encode_to_vec(&dref)
                .expect("encode")
                .iter()
                .map(|p| Aligned::from_slice(p))
                .collect();
            let mut jobs: Vec<Job<'_>> = Vec::new();
            jobs.push(job(
                "memread",
                "read",
                Box::new(|| {
                    black_box(read_all(black_box(&data)));
                }),
            ));
            #[cfg(kioku_isal)]
            {
                // ISA-L straight through FFI, one unchunked call: the in-process reference.
                let full = kioku_ec::isal_raw::gen_cauchy1_matrix(k, m);
                let tables = kioku_ec::isal_raw::init_tables(k, m, &full[k * k..]);
                let mut parity = aligned_set(m, size);
                let dref = dref.clone();
                jobs.push(job(
                    "isal_ffi",
                    "encode",
                    Box::new(move || {
                        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| &mut v[..]).collect();
                        kioku_ec::isal_raw::encode(&tables, &dref, &mut p);
                    }),
                ));
            }
            let mut engines = vec![Engine::best()];
            for e in [Engine::Isal, Engine::Avx2] {
                if e.is_available() && !engines.contains(&e) {
                    engines.push(e);
                }
            }
            for (n, &engine) in engines.iter().enumerate() {
                let name = if n == 0 {
                    "kioku".to_string()
                } else {
                    format!("kioku_{engine}")
                };
                let codec = std::sync::Arc::new(Codec::with_engine(k, m, engine).expect("codec"));
                {
                    let mut parity = aligned_set(m, size);
                    let (codec, dref) = (codec.clone(), dref.clone());
                    jobs.push(job(
                        &name,
                        "encode",
                        Box::new(move || {
                            let mut p: Vec<&mut [u8]> =
                                parity.iter_mut().map(|v| &mut v[..]).collect();
                            codec.encode(&dref, &mut p).expect("encode");
                        }),
                    ));
                }
                // Decode: data shards 0..m lost, the m parity shards used in their place.
                let surv: Vec<(usize, &[u8])> = (m..k)
                    .map(|i| (i, &data[i][..]))
                    .chain((0..m).map(|j| (k + j, &good_parity[j][..])))
                    .collect();
                for cached in [true, false] {
                    let codec = if cached {
                        codec.clone()
                    } else {
                        let c = Codec::with_engine(k, m, engine).expect("codec");
                        c.set_decode_cache_capacity(0);
                        std::sync::Arc::new(c)
                    };
                    let surv = surv.clone();
                    let mut out = aligned_set(m, size);
                    let mut checked = false;
                    let data = &data;
                    let op = if cached { "decode" } else { "decode_nocache" };
                    jobs.push(job(
                        &name,
                        op,
                        Box::new(move || {
                            let mut w: Vec<(usize, &mut [u8])> = out
                                .iter_mut()
                                .enumerate()
                                .map(|(i, b)| (i, &mut b[..]))
                                .collect();
                            codec.decode(&surv, &mut w).expect("decode");
                            if !checked {
                                for (i, b) in out.iter().enumerate() {
                                    assert_eq!(
                                        &b[..],
                                        &data[i][..],
                                        "kioku decoded shard {i} wrong"
                                    );
                                }
                                checked = true;
                            }
                        }),
                    ));
                }
                if n == 0 && o.delta {
                    for pct in [1usize, 10, 100] {
                        let len = (size * pct / 100).max(1);
                        let old = data[k / 2][..len].to_vec();
                        let new: Vec<u8> = old.iter().map(|b| b ^ 0x5a).collect();
                        let mut flip = false;
                        let mut parity = good_parity.clone();
                        let codec = codec.clone();
                        jobs.push(job(
                            "kioku",
                            &format!("update_{pct}pct"),
                            Box::new(move || {
                                let mut p: Vec<&mut [u8]> =
                                    parity.iter_mut().map(|v| &mut v[..]).collect();
                                let (a, b) = if flip { (&new, &old) } else { (&old, &new) };
                                codec.update(k / 2, 0, a, b, &mut p).expect("update");
                                flip = !flip;
                            }),
                        ));
                    }
                }
            }
            // reed-solomon-simd (Leopard-style FFT codec, its own matrix).
            if reed_solomon_simd::ReedSolomonEncoder::supports(k, m) && size % 2 == 0 {
                let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(k, m, size).expect("rs");
                for d in &data {
                    enc.add_original_shard(&d[..]).expect("add");
                }
                let rec: Vec<Vec<u8>> = enc
                    .encode()
                    .expect("encode")
                    .recovery_iter()
                    .map(|r| r.to_vec())
                    .collect();
                let data = &data;
                jobs.push(job(
                    "rs_simd",
                    "encode",
                    Box::new(move || {
                        for d in data {
                            enc.add_original_shard(&d[..]).expect("add");
                        }
                        let r = enc.encode().expect("encode");
                        black_box(r.recovery(0));
                    }),
                ));
                let mut dec = reed_solomon_simd::ReedSolomonDecoder::new(k, m, size).expect("rs");
                let mut checked = false;
                jobs.push(job(
                    "rs_simd",
                    "decode",
                    Box::new(move || {
                        for (i, d) in data.iter().enumerate().skip(m) {
                            dec.add_original_shard(i, &d[..]).expect("add");
                        }
                        for (j, r) in rec.iter().enumerate() {
                            dec.add_recovery_shard(j, r).expect("add");
                        }
                        let res = dec.decode().expect("decode");
                        if !checked {
                            for (i, d) in data.iter().enumerate().take(m) {
                                assert_eq!(res.restored_original(i), Some(&d[..]), "rs_simd");
                            }
                            checked = true;
                        }
                        black_box(res.restored_original(0));
                    }),
                ));
            }
            run_jobs(&o, k, m, size, bytes, jobs);
        }
    }
}
