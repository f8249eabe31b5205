//! `kioku hot PID|--self`: which pages a process accesses — HPS's `/proc/PID/page_acs` as a
//! command. Samples for a while, then prints per-page counts (text or `--json`) and can draw a
//! heat map (`--png`: address across, time down).
//!
//! * `kioku hot PID` (root): the shmem-backed shared mappings of PID (memfd, tmpfs,
//!   `/dev/shm`, shared anonymous memory), sampled from outside with the refault probe. Private
//!   memory of another process cannot be sampled on this kernel (no idle-page tracking, no
//!   DAMON for virtual addresses; see docs/hugepage.md) and is listed as skipped.
//! * `kioku hot --self`: this process runs a synthetic access pattern over an arena of its own
//!   and samples it with either backend — to see what the tracker reports on this machine
//!   without root, and how each pattern looks.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use kioku_track::{
    AccessOptions, AccessTracker, BackendKind, PageCount, PageRange, PageTracker, TrackError,
};

use crate::run_cmd::parse_duration;

#[derive(Args)]
pub struct HotArgs {
    /// The process to sample (root; its shared-memory mappings).
    #[arg(required_unless_present = "self_", conflicts_with = "self_")]
    pid: Option<i32>,
    /// Sample this process running a synthetic pattern instead (no root needed).
    #[arg(long = "self")]
    self_: bool,
    /// How long to sample.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Sampling period.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    period: Duration,
    /// Pages observed per period.
    #[arg(long, default_value_t = 4096)]
    sample: usize,
    /// Count at which a page is hot (marked `*` in the text output).
    #[arg(long, default_value_t = 2)]
    threshold: u8,
    /// Only this range (hex `START-END`, as in /proc/PID/maps); repeatable.
    #[arg(long = "range", value_parser = parse_range)]
    ranges: Vec<PageRange>,
    /// Also list pages observed but never found accessed.
    #[arg(long)]
    all: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Write a heat map (address across, time down) to this PNG file.
    #[arg(long)]
    png: Option<PathBuf>,
    /// --self: the access pattern.
    #[arg(long, value_enum, default_value_t = Pattern::Skewed)]
    pattern: Pattern,
    /// --self: arena size in MiB.
    #[arg(long, default_value_t = 64)]
    size_mib: usize,
    /// --self: sampling backend (refault: a memfd arena; protnone: anonymous memory).
    #[arg(long, value_enum, default_value_t = SelfBackend::Refault)]
    backend: SelfBackend,
}

#[derive(Clone, Copy, ValueEnum)]
enum Pattern {
    /// Every page, in address order.
    Seq,
    /// Every page, in a random order.
    Random,
    /// A random third of the pages, in a random order.
    Skewed,
}

#[derive(Clone, Copy, ValueEnum)]
enum SelfBackend {
    Refault,
    Protnone,
}

fn parse_range(s: &str) -> std::result::Result<PageRange, String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("'{s}' is not START-END"))?;
    let p = |x: &str| {
        usize::from_str_radix(x.trim_start_matches("0x"), 16)
            .map_err(|_| format!("'{x}' is not a hex address"))
    };
    let (a, b) = (p(a)?, p(b)?);
    let ps = kioku_track::page_size();
    if a >= b || a % ps != 0 || b % ps != 0 {
        return Err(format!("'{s}' is empty or not page aligned"));
    }
    Ok(PageRange::new(a, b))
}

/// One mapping of /proc/PID/maps.
struct Mapping {
    range: PageRange,
    line: String,
}

fn mappings(pid: i32) -> Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("process {pid} does not exist or its maps are not readable"))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(span) = line.split_whitespace().next() else {
            continue;
        };
        let Some((a, b)) = span.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        out.push(Mapping {
            range: PageRange::new(a, b),
            line: line.to_string(),
        });
    }
    Ok(out)
}

/// What sampling saw, for the report and the heat map.
struct Sampled {
    pid: i32,
    backend: BackendKind,
    tracked: Vec<PageRange>,
    skipped: Vec<(String, String)>,
    counts: Vec<PageCount>,
    /// Per scan: (seconds since start, pages observed, pages of those found accessed).
    timeline: Vec<(f64, Vec<PageRange>, Vec<PageRange>)>,
    scans: usize,
    work: Duration,
}

pub fn run(args: HotArgs) -> Result<i32> {
    let s = if args.self_ {
        sample_self(&args)?
    } else {
        sample_pid(args.pid.expect("clap requires a pid"), &args)?
    };
    if let Some(path) = &args.png {
        heatmap(&s, path).with_context(|| format!("writing {}", path.display()))?;
    }
    let printed = if args.json {
        print_json(&s, &args)
    } else {
        print_text(&s, &args)
    };
    match printed {
        // A reader that stopped early (`| head`) is not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(0)
        }
        Err(e) => Err(e),
        Ok(()) => Ok(0),
    }
}

fn options(args: &HotArgs) -> AccessOptions {
    AccessOptions {
        sample_pages: args.sample.max(1),
        cpu_budget: 0.0,
        hot_threshold: args.threshold.max(1),
        ..AccessOptions::default()
    }
}

fn sample_pid(pid: i32, args: &HotArgs) -> Result<Sampled> {
    let mut t = AccessTracker::builder()
        .process(pid)
        .options(options(args))
        .build()
        .map_err(|e| explain(pid, e))?;
    let mut tracked = Vec::new();
    let mut skipped = Vec::new();
    for m in mappings(pid)? {
        let wanted = if args.ranges.is_empty() {
            Some(m.range)
        } else {
            args.ranges
                .iter()
                .find(|r| r.start < m.range.end && m.range.start < r.end)
                .map(|r| PageRange::new(r.start.max(m.range.start), r.end.min(m.range.end)))
        };
        let Some(r) = wanted else { continue };
        // Only shared, readable mappings are candidates; [vvar] and the like refuse anyway.
        let perms = m.line.split_whitespace().nth(1).unwrap_or("");
        if !perms.starts_with('r') || !perms.ends_with('s') {
            if perms.starts_with("rw") {
                skipped.push((m.line.clone(), "private memory".to_string()));
            }
            continue;
        }
        match t.track(r) {
            Ok(()) => tracked.push(r),
            Err(e @ TrackError::NotShared { .. }) => skipped.push((m.line.clone(), e.to_string())),
            Err(e) => return Err(explain(pid, e)),
        }
    }
    if tracked.is_empty() {
        bail!(
            "process {pid} has no shmem-backed shared mapping to sample ({} private read-write \
             mappings skipped: another process's private memory cannot be sampled here — see \
             docs/hugepage.md); try `kioku hot --self`",
            skipped.len()
        );
    }
    let mut s = sample(&mut t, pid, args.period, args.duration, tracked)?;
    s.skipped = skipped;
    Ok(s)
}

fn explain(pid: i32, e: TrackError) -> anyhow::Error {
    match e {
        TrackError::ProcessGone { .. } => anyhow::anyhow!("process {pid} does not exist"),
        TrackError::PermissionDenied { .. } => {
            anyhow::anyhow!("{e} (sampling another process needs root)")
        }
        other => other.into(),
    }
}

fn sample(
    t: &mut AccessTracker,
    pid: i32,
    period: Duration,
    duration: Duration,
    tracked: Vec<PageRange>,
) -> Result<Sampled> {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut timeline = Vec::new();
    let mut scans = 0;
    let mut work = Duration::ZERO;
    while start.elapsed() < duration {
        std::thread::sleep(period);
        t.scan_into(&mut out)
            .map_err(|e| explain(pid, e))
            .context("sampling")?;
        let s = t.last_scan();
        work += s.work;
        scans += 1;
        timeline.push((
            start.elapsed().as_secs_f64(),
            t.observed().to_vec(),
            out.clone(),
        ));
    }
    let mut counts = Vec::new();
    for r in &tracked {
        t.counts(*r, &mut counts);
    }
    Ok(Sampled {
        pid,
        backend: t.backend(),
        tracked,
        skipped: Vec::new(),
        counts,
        timeline,
        scans,
        work,
    })
}

fn sample_self(args: &HotArgs) -> Result<Sampled> {
    let ps = kioku_track::page_size();
    let len = args.size_mib.max(1) << 20;
    let pages = len / ps;
    let shared = matches!(args.backend, SelfBackend::Refault);
    // SAFETY: memfd_create with a static name; the fd is closed after mapping.
    let fd = if shared {
        let fd = unsafe { libc::memfd_create(c"kioku-hot".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            bail!("memfd_create: {}", std::io::Error::last_os_error());
        }
        // SAFETY: sizing our own memfd.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            bail!("ftruncate: {}", std::io::Error::last_os_error());
        }
        fd
    } else {
        -1
    };
    let flags = if shared {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
    };
    // SAFETY: a fresh mapping owned by this function until it returns (unmapped below).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if shared {
        // SAFETY: closing our own descriptor; the mapping keeps the memfd alive.
        unsafe { libc::close(fd) };
    }
    if p == libc::MAP_FAILED {
        bail!("mmap: {}", std::io::Error::last_os_error());
    }
    let addr = p as usize;
    // SAFETY: advice on our own mapping: keep it in 4 KiB pages so that every page is sampled.
    unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut order: Vec<usize> = (0..pages).collect();
    if !matches!(args.pattern, Pattern::Seq) {
        for i in (1..pages).rev() {
            order.swap(i, (next() % (i as u64 + 1)) as usize);
        }
    }
    if matches!(args.pattern, Pattern::Skewed) {
        order.truncate(pages / 3);
    }
    for &i in &order {
        // SAFETY: page i lies inside our mapping.
        unsafe { std::ptr::write_volatile((addr + i * ps) as *mut u8, 1) };
    }
    let stop = Arc::new(AtomicBool::new(false));
    let toucher = {
        let (stop, order) = (stop.clone(), order.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for &i in &order {
                    // SAFETY: page i lies inside the mapping, unmapped only after this thread
                    // is joined.
                    unsafe { std::ptr::read_volatile((addr + i * ps) as *const u8) };
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let kind = if shared {
        BackendKind::Refault
    } else {
        BackendKind::ProtNone
    };
    let range = PageRange::new(addr, addr + len);
    let result = (|| {
        let mut t = AccessTracker::builder()
            .backend(kind)
            .options(options(args))
            .build()?;
        t.track(range)?;
        let s = sample(
            &mut t,
            std::process::id() as i32,
            args.period,
            args.duration,
            vec![range],
        );
        drop(t);
        s
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = toucher.join();
    // SAFETY: unmapping our own arena; the toucher has stopped and the tracker is dropped.
    unsafe { libc::munmap(p, len) };
    result
}

/// Runs of consecutive pages with the same counts, for the text output.
fn runs(counts: &[PageCount], all: bool) -> Vec<(PageRange, PageCount)> {
    let ps = kioku_track::page_size();
    let mut out: Vec<(PageRange, PageCount)> = Vec::new();
    for c in counts.iter().filter(|c| all || c.hits > 0) {
        if let Some((r, last)) = out.last_mut() {
            if r.end == c.addr && (last.count, last.hits, last.seen) == (c.count, c.hits, c.seen) {
                r.end += ps;
                continue;
            }
        }
        out.push((PageRange::new(c.addr, c.addr + ps), *c));
    }
    out
}

fn print_text(s: &Sampled, args: &HotArgs) -> Result<()> {
    let mut o = std::io::stdout().lock();
    let hot = s
        .counts
        .iter()
        .filter(|c| c.count >= args.threshold)
        .count();
    let touched = s.counts.iter().filter(|c| c.hits > 0).count();
    writeln!(
        o,
        "# pid {} ({}), backend {:?}, {} scans in {:.1} s, tracker work {:.1} ms",
        s.pid,
        if args.self_ {
            "this kioku process, synthetic pattern"
        } else {
            "sampled from outside"
        },
        s.backend,
        s.scans,
        s.timeline.last().map_or(0.0, |t| t.0),
        s.work.as_secs_f64() * 1e3
    )?;
    writeln!(
        o,
        "# {} pages tracked, {} observed, {touched} found accessed, {hot} hot (count >= {}); \
         columns: pages : hits/observations count (* hot)",
        s.tracked.iter().map(|r| r.len_pages()).sum::<usize>(),
        s.counts.len(),
        args.threshold
    )?;
    let maps = if args.self_ {
        Vec::new()
    } else {
        mappings(s.pid).unwrap_or_default()
    };
    let mut by_mapping: BTreeMap<usize, Vec<(PageRange, PageCount)>> = BTreeMap::new();
    for (r, c) in runs(&s.counts, args.all) {
        let m = s
            .tracked
            .iter()
            .find(|t| t.contains(r.start))
            .map_or(0, |t| t.start);
        by_mapping.entry(m).or_default().push((r, c));
    }
    for t in &s.tracked {
        let header = maps.iter().find(|m| m.range.contains(t.start)).map_or_else(
            || format!("{:x}-{:x} (arena)", t.start, t.end),
            |m| m.line.clone(),
        );
        writeln!(o, "{header}")?;
        for (r, c) in by_mapping.get(&t.start).into_iter().flatten() {
            writeln!(
                o,
                "{:012x}-{:012x} : {}/{} {}{}",
                r.start,
                r.end,
                c.hits,
                c.seen,
                c.count,
                if c.count >= args.threshold { " *" } else { "" }
            )?;
        }
    }
    for (line, why) in &s.skipped {
        writeln!(o, "# skipped {line}: {why}")?;
    }
    Ok(())
}

fn print_json(s: &Sampled, args: &HotArgs) -> Result<()> {
    let pages: Vec<serde_json::Value> = s
        .counts
        .iter()
        .filter(|c| args.all || c.hits > 0)
        .map(|c| {
            serde_json::json!({
                "addr": format!("{:#x}", c.addr),
                "count": c.count,
                "hits": c.hits,
                "seen": c.seen,
                "hot": c.count >= args.threshold,
            })
        })
        .collect();
    let v = serde_json::json!({
        "pid": s.pid,
        "self": args.self_,
        "backend": format!("{:?}", s.backend),
        "period_ms": args.period.as_secs_f64() * 1e3,
        "scans": s.scans,
        "threshold": args.threshold,
        "tracker_work_ms": s.work.as_secs_f64() * 1e3,
        "tracked": s.tracked.iter().map(|r| serde_json::json!({
            "start": format!("{:#x}", r.start), "end": format!("{:#x}", r.end)
        })).collect::<Vec<_>>(),
        "skipped": s.skipped.iter().map(|(l, w)| serde_json::json!({"mapping": l, "why": w})).collect::<Vec<_>>(),
        "pages": pages,
    });
    let mut o = std::io::stdout().lock();
    writeln!(o, "{}", serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

/// A heat map: one column per group of pages (address order over the tracked ranges), one band
/// per group of scans (time down). A cell's colour is the share of its observed pages found
/// accessed: white none, yellow some, dark red all; grey where nothing was observed.
fn heatmap(s: &Sampled, path: &std::path::Path) -> Result<()> {
    let ps = kioku_track::page_size();
    let total: usize = s.tracked.iter().map(|r| r.len_pages()).sum();
    if total == 0 || s.timeline.is_empty() {
        bail!("nothing was sampled");
    }
    let width = total.min(1024);
    let rows = s.timeline.len().min(300);
    // Each band at least 4 pixels high, the picture at least 120.
    let band = (120usize.div_ceil(rows)).max(4);
    let col_of = |addr: usize| -> Option<usize> {
        let mut base = 0;
        for r in &s.tracked {
            if r.contains(addr) {
                return Some((base + (addr - r.start) / ps) * width / total);
            }
            base += r.len_pages();
        }
        None
    };
    let mut seen = vec![0u32; width * rows];
    let mut hit = vec![0u32; width * rows];
    for (i, (_, observed, accessed)) in s.timeline.iter().enumerate() {
        let row = i * rows / s.timeline.len();
        for (list, cells) in [(observed, &mut seen), (accessed, &mut hit)] {
            for r in list {
                for p in r.pages() {
                    if let Some(c) = col_of(p) {
                        cells[row * width + c] += 1;
                    }
                }
            }
        }
    }
    let mut pixels = Vec::with_capacity(width * rows * band * 3);
    for row in 0..rows {
        let mut line = Vec::with_capacity(width * 3);
        for c in 0..width {
            let (n, h) = (seen[row * width + c], hit[row * width + c]);
            let rgb = if n == 0 {
                [200, 200, 200]
            } else {
                let v = h as f64 / n as f64;
                if v == 0.0 {
                    [255, 255, 255]
                } else if v < 0.5 {
                    [255, 255 - (v * 200.0) as u8, 160 - (v * 320.0) as u8]
                } else {
                    [
                        255 - ((v - 0.5) * 256.0) as u8,
                        155 - ((v - 0.5) * 310.0) as u8,
                        0,
                    ]
                }
            };
            line.extend_from_slice(&rgb);
        }
        for _ in 0..band {
            pixels.extend_from_slice(&line);
        }
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut enc = png::Encoder::new(file, width as u32, (rows * band) as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.add_text_chunk(
        "Description".into(),
        format!(
            "kioku hot: pid {}, {} pages across (address order), {} scans down",
            s.pid, total, s.scans
        ),
    )?;
    let mut w = enc.write_header()?;
    w.write_image_data(&pixels)?;
    w.finish()?;
    Ok(())
}
