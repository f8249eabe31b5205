//! Commit latency per medium: a durable 1-page and 1 MiB update (write the bytes into a
//! section, flush them, commit — the commit's fence covers them), beside two baselines measured in the same run: a plain
//! memcpy of the same bytes, and, for the disk, pwrite + fdatasync of the same bytes to a
//! plain file (what a naive durable write costs there). Prints a Markdown table.
//!
//! Run: bench/pool/run.sh (or `cargo bench -p kioku-pool --bench commit`).

use kioku_pool::media::sim::SimMedium;
use kioku_pool::media::{MediumChoice, MediumKind};
use kioku_pool::{CreateOptions, Pool};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn median_p99(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// Times `reps` durable updates of `len` bytes on `pool`.
fn time_updates(pool: &mut Pool, len: u64, reps: usize) -> Vec<Duration> {
    let s = pool.create_section(&format!("bench{len}"), len, 0).unwrap();
    pool.commit(&[]).unwrap();
    (0..reps)
        .map(|i| {
            let t = Instant::now();
            pool.bytes_mut(s.offset, len).fill(i as u8);
            pool.flush(s.offset, len).unwrap();
            pool.commit(&[i as u64]).unwrap();
            t.elapsed()
        })
        .collect()
}

fn memcpy_baseline(len: usize, reps: usize) -> Vec<Duration> {
    let src = vec![7u8; len];
    let mut dst = vec![0u8; len];
    (0..reps)
        .map(|i| {
            let t = Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(&mut dst)[i % len] ^= 1;
            t.elapsed()
        })
        .collect()
}

fn fdatasync_baseline(dir: &Path, len: usize, reps: usize) -> Vec<Duration> {
    let f = std::fs::File::create(dir.join("plain.bin")).unwrap();
    let buf = vec![3u8; len];
    f.write_all_at(&buf, 0).unwrap();
    f.sync_all().unwrap();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f.write_all_at(&buf, 0).unwrap();
            f.sync_data().unwrap();
            t.elapsed()
        })
        .collect()
}

fn main() {
    let disk_dir = std::env::var("KIOKU_BENCH_DIR").unwrap_or_else(|_| ".kioku/bench".into());
    std::fs::create_dir_all(&disk_dir).unwrap();
    let disk = tempfile::tempdir_in(&disk_dir).unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let sizes = [(4096u64, 300usize), (1 << 20, 60)];
    let mut rows = Vec::new();
    for (len, reps) in sizes {
        let label = if len == 4096 {
            "1 page (4 KiB)"
        } else {
            "1 MiB"
        };
        let (m, p) = median_p99(memcpy_baseline(len as usize, reps));
        rows.push(format!(
            "| {label} | memcpy (baseline) | {} | {} | 1.0 |",
            us(m),
            us(p)
        ));
        let base = m;
        for kind in [MediumKind::File, MediumKind::Shm, MediumKind::Sim] {
            let mut pool = match kind {
                MediumKind::Sim => Pool::create_on(
                    Box::new(SimMedium::new(0).unwrap()),
                    &CreateOptions::new("kioku.bench"),
                )
                .unwrap(),
                _ => {
                    let dir = if kind == MediumKind::Shm {
                        shm.path()
                    } else {
                        disk.path()
                    };
                    let mut o = CreateOptions::new("kioku.bench");
                    o.medium = MediumChoice::Exactly(kind);
                    Pool::create(&dir.join(format!("{len}.pool")), &o).unwrap()
                }
            };
            let (m, p) = median_p99(time_updates(&mut pool, len, reps));
            rows.push(format!(
                "| {label} | kioku commit, {kind} | {} | {} | {:.2} |",
                us(m),
                us(p),
                m.as_secs_f64() / base.as_secs_f64()
            ));
        }
        let (m, p) = median_p99(fdatasync_baseline(disk.path(), len as usize, reps));
        rows.push(format!(
            "| {label} | pwrite + fdatasync, same disk (baseline) | {} | {} | {:.2} |",
            us(m),
            us(p),
            m.as_secs_f64() / base.as_secs_f64()
        ));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "| update | method | median µs | p99 µs | × memcpy |").unwrap();
    writeln!(out, "|---|---|---:|---:|---:|").unwrap();
    for r in rows {
        writeln!(out, "{r}").unwrap();
    }
}
