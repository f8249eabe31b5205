//! Checkpoint stop time as a function of dirty MiB, per medium.
//!
//! One 512 MiB region per medium (`shm`: pool under /dev/shm; `file`: pool under
//! `.kioku/bench/`, or `$KIOKU_BENCH_DIR`). Every page is written and checkpointed first;
//! then, per point, the benchmark writes one word into each page of a set (0 %, 1 %, 10 %,
//! 50 %, 100 % of the pages spread evenly over the region, and a few absolute MiB as one
//! contiguous run), takes a checkpoint and records its `CheckpointStats` (scan / persist /
//! sync / total), then takes an unmeasured empty checkpoint (so no point follows a streak of
//! heavily written epochs). A last point writes every page in every epoch, which the engine
//! may answer by taking the region whole instead of tracking it. Beside each checkpoint, in the same run and interleaved with it, a plain
//! memcpy of the same pages between two pre-faulted anonymous buffers is timed. For the
//! `file` rows the disk's sequential write bandwidth is measured in the same run (1 GiB of
//! 8 MiB `write`s then `fdatasync`, on the filesystem holding the pool).
//!
//! Prints Markdown tables. Run: `cargo bench -p kioku-ckpt --bench stop_time`
//! (flags: `--media shm,file`, `--reps N`, `--region-mib N`, `--disk-mib N`, `--verbose`).

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
    /// Every page, in every epoch (no empty checkpoint in between), after `HOT_WARMUP` such
    /// epochs: the engine may then take the region whole instead of tracking it.
    Hot,
}

/// Unmeasured all-pages epochs before the `Hot` point's measured ones.
const HOT_WARMUP: usize = 4;

impl Pattern {
    fn label(&self) -> String {
        match self {
            Pattern::Spread { pct } => format!("{pct} % spread"),
            Pattern::Run { mib } => format!("{mib} MiB contiguous"),
            Pattern::Hot => "100 % in every epoch".to_string(),
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
            Pattern::Hot => vec![(0, pages)],
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

fn median_u64(mut v: Vec<u64>) -> u64 {
    v.sort();
    v[v.len() / 2]
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
    reported_mib: f64,
    over: usize,
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
    verbose: bool,
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
    write_pages(base, &all, stamp);
    stamp += 1;
    e.checkpoint(b"warm").unwrap();
    e.checkpoint(b"cool").unwrap();
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
        let hot = matches!(pat, Pattern::Hot);
        if hot {
            for _ in 0..HOT_WARMUP {
                write_pages(base, &runs, stamp);
                stamp += 1;
                e.checkpoint(b"hot").unwrap();
            }
        }
        for i in 0..n {
            // Interleave: memcpy first on even reps, checkpoint first on odd ones.
            if i % 2 == 0 {
                cp.push(copy.time(&runs));
            }
            write_pages(base, &runs, stamp);
            stamp += 1;
            let s = e.checkpoint(&stamp.to_le_bytes()).unwrap();
            if verbose {
                eprintln!("stop_time:   {kind} {} rep {i}: {s:?}", pat.label());
            }
            st.push(s);
            if i % 2 == 1 {
                cp.push(copy.time(&runs));
            }
            if !hot {
                // An empty epoch between measured ones, so that no point follows a streak of
                // heavily written epochs (the engine may stop tracking a region written
                // nearly whole in every epoch; the `Hot` point measures that case).
                e.checkpoint(b"cool").unwrap();
            }
        }
        // The tracker may report more than was written (never less: that would lose data);
        // count the checkpoints where it did.
        let expect = (runs.iter().map(|r| r.1).sum::<usize>() * PAGE) as u64;
        assert!(
            st.iter().all(|s| s.dirty_bytes >= expect),
            "tracker missed written pages"
        );
        let over = st.iter().filter(|s| s.dirty_bytes > expect).count();
        if over > 0 {
            eprintln!(
                "stop_time: {kind} {}: tracker reported more than written in {over} of {n} checkpoints: {:?} MiB",
                pat.label(),
                st.iter().map(|s| s.dirty_bytes >> 20).collect::<Vec<_>>()
            );
        }
        let row = Row {
            medium: kind,
            pattern: *pat,
            dirty_mib: expect as f64 / (1 << 20) as f64,
            reported_mib: median_u64(st.iter().map(|s| s.dirty_bytes).collect()) as f64
                / (1 << 20) as f64,
            over,
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
    let verbose = args.iter().any(|a| a == "--verbose");
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
    // Last: it may leave the region untracked for a while.
    points.push(Pattern::Hot);

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
        rows.extend(bench_medium(
            kind, dir, region, &points, reps, &mut copy, verbose,
        ));
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
        "| medium | pages written | dirty MiB | reported MiB (median; over-reports) | runs | stop ms (median) | max ms | scan ms | persist ms | sync ms | memcpy of same pages ms | stop ÷ memcpy | reps |"
    )
    .unwrap();
    writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
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
            "| {} | {} | {:.1} | {:.1}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.medium,
            r.pattern.label(),
            r.dirty_mib,
            r.reported_mib,
            if r.over > 0 {
                format!(" ({} of {})", r.over, r.reps)
            } else {
                String::new()
            },
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
