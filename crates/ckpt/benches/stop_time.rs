//! Checkpoint stop time as a function of dirty MiB, per medium.
//!
//! One 512 MiB region per medium (`shm`: pool under /dev/shm; `file`: pool under
//! `.kioku/bench/`, or `$KIOKU_BENCH_DIR`). Every page is written and checkpointed twice
//! first; then, per point, the benchmark writes one word into each page of a set (0 %, 1 %,
//! 10 %, 50 %, 100 % of the pages spread evenly over the region, and a few absolute MiB as one
//! contiguous run), takes a checkpoint and records its `CheckpointStats` (scan / persist /
//! sync / total). Beside each checkpoint, in the same run and interleaved with it, a plain
//! memcpy of the same pages between two pre-faulted anonymous buffers is timed. For the
//! `file` rows the disk's sequential write bandwidth is measured in the same run (1 GiB of
//! 8 MiB `write`s then `fdatasync`, on the filesystem holding the pool).
//!
//! Prints Markdown tables. Run: `cargo bench -p kioku-ckpt --bench stop_time`
//! (flags: `--media shm,file`, `--reps N`, `--region-mib N`, `--disk-mib N`).

use kioku_ckpt::{CheckpointStats, Engine, EngineOptions, RegionOptions};
use kioku_pool::{MediumChoice, MediumKind};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// Which pages a point writes.
#[derive(Clone, Copy, Debug)]
enum Pattern {
    /// `pct` % of the pages, spread evenly (every (100/pct)-th page, by Bresenham).
    Spread { pct: u32 },
    /// `mib` MiB as one contiguous run from the region's start.
    Run { mib: usize },
}

impl Pattern {
    fn label(&self) -> String {
        match self {
            Pattern::Spread { pct } => format!("{pct} % spread"),
            Pattern::Run { mib } => format!("{mib} MiB contiguous"),
        }
    }

    /// Page runs `(first, count)` of the pattern in a region of `pages` pages.
    fn runs(&self, pages: usize) -> Vec<(usize, usize)> {
        match *self {
            Pattern::Spread { pct } => {
                let mut runs: Vec<(usize, usize)> = Vec::new();
                for p in 0..pages {
                    // page p is in the set when floor((p+1)·pct/100) > floor(p·pct/100)
                    let hit = ((p + 1) * pct as usize) / 100 > (p * pct as usize) / 100;
                    if hit {
                        match runs.last_mut() {
                            Some((f, n)) if *f + *n == p => *n += 1,
                            _ => runs.push((p, 1)),
                        }
                    }
                }
                runs
            }
            Pattern::Run { mib } => {
                let n = (mib << 20) / PAGE;
                if n == 0 {
                    vec![]
                } else {
                    vec![(0, n.min(pages))]
                }
            }
        }
    }
}

/// Two pre-faulted anonymous buffers for the memcpy baseline.
struct CopyBase {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl CopyBase {
    fn new(len: usize) -> CopyBase {
        let mut src = vec![0u8; len];
        let mut dst = vec![0u8; len];
        for i in (0..len).step_by(PAGE) {
            src[i] = i as u8 | 1;
            dst[i] = 2;
        }
        CopyBase { src, dst }
    }

    fn time(&mut self, runs: &[(usize, usize)]) -> Duration {
        let t = Instant::now();
        for &(f, n) in runs {
            let (a, b) = (f * PAGE, (f + n) * PAGE);
            self.dst[a..b].copy_from_slice(&self.src[a..b]);
        }
        let d = t.elapsed();
        std::hint::black_box(&mut self.dst);
        d
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    if v.is_empty() {
        Duration::ZERO
    } else {
        v[v.len() / 2]
    }
}

fn ms(d: Duration) -> String {
    let x = d.as_secs_f64() * 1e3;
    if x < 1.0 {
        format!("{x:.3}")
    } else if x < 100.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.0}")
    }
}

/// Sequential write bandwidth of the filesystem holding `dir`: `mib` MiB in 8 MiB writes, then
/// fdatasync; MiB/s, median of `reps`.
fn disk_bandwidth(dir: &Path, mib: usize, reps: usize) -> (f64, Vec<f64>) {
    let path = dir.join("seqwrite.bin");
    let chunk = vec![0x5au8; 8 << 20];
    let mut v = Vec::new();
    for r in 0..reps {
        let _ = std::fs::remove_file(&path);
        let f = std::fs::File::create(&path).unwrap();
        let t = Instant::now();
        for i in 0..(mib / 8) {
            let mut c = chunk.clone();
            c[0] = (r + i) as u8;
            f.write_all_at(&c, (i * chunk.len()) as u64).unwrap();
        }
        f.sync_data().unwrap();
        let secs = t.elapsed().as_secs_f64();
        v.push(mib as f64 / secs);
    }
    let _ = std::fs::remove_file(&path);
    let mut s = v.clone();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (s[s.len() / 2], v)
}

struct Row {
    medium: MediumKind,
    pattern: Pattern,
    dirty_mib: f64,
    runs: usize,
    total: Duration,
    scan: Duration,
    persist: Duration,
    sync: Duration,
    max_total: Duration,
    memcpy: Duration,
    reps: usize,
}

fn write_pages(base: *mut u8, runs: &[(usize, usize)], stamp: u64) {
    for &(f, n) in runs {
        for p in f..f + n {
            // SAFETY: p < pages of the mapped region; one aligned 8-byte store per page.
            unsafe { (base.add(p * PAGE + 64) as *mut u64).write_volatile(stamp) };
        }
    }
}

fn bench_medium(
    kind: MediumKind,
    dir: &Path,
    region: usize,
    points: &[Pattern],
    reps: usize,
    copy: &mut CopyBase,
) -> Vec<Row> {
    let opts = EngineOptions {
        medium: MediumChoice::Exactly(kind),
        ..Default::default()
    };
    let path = dir.join(format!("stop_time.{kind}.pool"));
    let _ = std::fs::remove_file(&path);
    let mut e = Engine::create(&path, &opts).unwrap();
    let info = e
        .create_region("bench", region, RegionOptions::default())
        .unwrap();
    let base = info.as_ptr();
    let pages = info.len / PAGE;
    let all = vec![(0usize, pages)];
    let mut stamp = 1u64;
    for _ in 0..2 {
        write_pages(base, &all, stamp);
        stamp += 1;
        e.checkpoint(b"warm").unwrap();
    }
    eprintln!(
        "stop_time: {kind}: tracker {:?}, {} MiB region",
        e.tracker_backend(),
        region >> 20
    );
    let mut rows = Vec::new();
    for pat in points {
        let runs = pat.runs(pages);
        let n = if runs.iter().map(|r| r.1).sum::<usize>() * PAGE >= (256 << 20) {
            reps.div_ceil(2).max(3)
        } else {
            reps
        };
        let mut st: Vec<CheckpointStats> = Vec::new();
        let mut cp = Vec::new();
        for i in 0..n {
            // Interleave: memcpy first on even reps, checkpoint first on odd ones.
            if i % 2 == 0 {
                cp.push(copy.time(&runs));
            }
            write_pages(base, &runs, stamp);
            stamp += 1;
            st.push(e.checkpoint(&stamp.to_le_bytes()).unwrap());
            if i % 2 == 1 {
                cp.push(copy.time(&runs));
            }
        }
        let dirty = st[0].dirty_bytes;
        assert!(
            st.iter().all(|s| s.dirty_bytes == dirty),
            "dirty bytes vary across reps"
        );
        let expect = runs.iter().map(|r| r.1).sum::<usize>() * PAGE;
        assert_eq!(dirty as usize, expect, "tracker saw a different page set");
        let row = Row {
            medium: kind,
            pattern: *pat,
            dirty_mib: dirty as f64 / (1 << 20) as f64,
            runs: runs.len(),
            total: median(st.iter().map(|s| s.total).collect()),
            scan: median(st.iter().map(|s| s.scan).collect()),
            persist: median(st.iter().map(|s| s.persist).collect()),
            sync: median(st.iter().map(|s| s.sync).collect()),
            max_total: st.iter().map(|s| s.total).max().unwrap(),
            memcpy: median(cp),
            reps: n,
        };
        eprintln!(
            "stop_time: {kind} {}: {:.1} MiB, stop {} ms (scan {} persist {} sync {}), memcpy {} ms",
            pat.label(),
            row.dirty_mib,
            ms(row.total),
            ms(row.scan),
            ms(row.persist),
            ms(row.sync),
            ms(row.memcpy)
        );
        rows.push(row);
    }
    drop(e);
    let _ = std::fs::remove_file(&path);
    rows
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let media: Vec<MediumKind> = arg("--media")
        .unwrap_or_else(|| "shm,file".into())
        .split(',')
        .map(|m| match m {
            "shm" => MediumKind::Shm,
            "file" => MediumKind::File,
            other => panic!("unknown medium {other}"),
        })
        .collect();
    let reps: usize = arg("--reps").map(|s| s.parse().unwrap()).unwrap_or(7);
    let region_mib: usize = arg("--region-mib")
        .map(|s| s.parse().unwrap())
        .unwrap_or(512);
    let disk_mib: usize = arg("--disk-mib")
        .map(|s| s.parse().unwrap())
        .unwrap_or(1024);
    let region = region_mib << 20;
    let mut points: Vec<Pattern> = [0, 1, 10, 50, 100]
        .into_iter()
        .map(|pct| Pattern::Spread { pct })
        .collect();
    points.extend(
        [1usize, 4, 16, 64, 256]
            .into_iter()
            .filter(|&m| m < region_mib)
            .map(|mib| Pattern::Run { mib }),
    );

    let disk_root = std::env::var("KIOKU_BENCH_DIR").unwrap_or_else(|_| ".kioku/bench".into());
    std::fs::create_dir_all(&disk_root).unwrap();
    let disk = tempfile::tempdir_in(&disk_root).unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut copy = CopyBase::new(region);

    let mut rows = Vec::new();
    let mut bw: Option<(f64, Vec<f64>)> = None;
    for &kind in &media {
        if kind == MediumKind::File {
            bw = Some(disk_bandwidth(disk.path(), disk_mib, 3));
            eprintln!(
                "stop_time: disk sequential write {:.0} MiB/s",
                bw.as_ref().unwrap().0
            );
        }
        let dir = if kind == MediumKind::Shm {
            shm.path()
        } else {
            disk.path()
        };
        rows.extend(bench_medium(kind, dir, region, &points, reps, &mut copy));
    }
    if media.contains(&MediumKind::File) {
        // Second bandwidth measurement after the file rows, so drift shows.
        let after = disk_bandwidth(disk.path(), disk_mib, 1);
        if let Some((_, v)) = bw.as_mut() {
            v.extend(after.1);
        }
    }

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "| medium | pages written | dirty MiB | runs | stop ms (median) | max ms | scan ms | persist ms | sync ms | memcpy of same pages ms | stop ÷ memcpy | reps |"
    )
    .unwrap();
    writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    .unwrap();
    for r in &rows {
        let ratio = if r.memcpy.is_zero() || r.dirty_mib == 0.0 {
            "—".to_string()
        } else {
            format!("{:.1}", r.total.as_secs_f64() / r.memcpy.as_secs_f64())
        };
        writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.medium,
            r.pattern.label(),
            r.dirty_mib,
            r.runs,
            ms(r.total),
            ms(r.max_total),
            ms(r.scan),
            ms(r.persist),
            ms(r.sync),
            ms(r.memcpy),
            ratio,
            r.reps
        )
        .unwrap();
    }
    if let Some((bw, all)) = bw {
        writeln!(out).unwrap();
        let all: Vec<String> = all.iter().map(|x| format!("{x:.0}")).collect();
        writeln!(
            out,
            "Disk (filesystem of the `file` pool), sequential write measured in the same run: **{bw:.0} MiB/s** ({disk_mib} MiB in 8 MiB writes + fdatasync; median of 3 before the file rows; runs before/after: {} MiB/s).",
            all.join(", ")
        )
        .unwrap();
        writeln!(out).unwrap();
        writeln!(
            out,
            "| medium | pages written | dirty MiB | stop ms | dirty ÷ disk bandwidth ms (floor for one write-back) | stop ÷ floor | effective MiB/s (dirty ÷ stop) |"
        )
        .unwrap();
        writeln!(out, "|---|---|---:|---:|---:|---:|---:|").unwrap();
        for r in rows
            .iter()
            .filter(|r| r.medium == MediumKind::File && r.dirty_mib > 0.0)
        {
            let floor = r.dirty_mib / bw;
            let t = r.total.as_secs_f64();
            writeln!(
                out,
                "| file | {} | {:.1} | {} | {:.2} | {:.1} | {:.0} |",
                r.pattern.label(),
                r.dirty_mib,
                ms(r.total),
                floor * 1e3,
                t / floor,
                r.dirty_mib / t
            )
            .unwrap();
        }
    }
}
