//! `kioku run`, `kioku checkpoint`, `kioku restore`, `kioku inspect`: transparent process
//! checkpoints.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use kioku_pool::media::{MediumChoice, MediumKind};
use kioku_pool::{CreateOptions, OpenOptions, Pool};
use kioku_proc::{Exit, Namespace, Tracee, TraceeCommand, Tree};
use kioku_run::control::{request_checkpoint, Target};
use kioku_run::{Capturer, Monitor, MonitorOptions, Summary, TreeImage};

/// Where pools go without --pool.
const DEFAULT_DIR: &str = ".kioku";

#[derive(Args)]
pub struct RunArgs {
    /// Pool file; default: ./.kioku/<program>.pool (a new name when that one is in use).
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Time between checkpoints (e.g. 10ms, 1s, 2m); 0: only on request.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// dax, file or shm; default: dax where MAP_SYNC works, shm on tmpfs, else file.
    #[arg(long)]
    medium: Option<MediumKind>,
    /// Print a summary (checkpoints, stop times, pool) to stderr at the end.
    #[arg(long)]
    summary: bool,
    /// Pass on descriptors above 2 that kioku itself inherited (by default they are closed:
    /// a stray pipe or socket would stop checkpoints).
    #[arg(long)]
    inherit_fds: bool,
    /// Write the summary as JSON to this file at the end.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// Pool file; default: the most recent restorable pool under ./.kioku/.
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Time between checkpoints after the restore; 0: only on request.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Print a summary to stderr at the end.
    #[arg(long)]
    summary: bool,
    /// Write the summary as JSON to this file at the end.
    #[arg(long)]
    summary_json: Option<PathBuf>,
}

#[derive(Args)]
pub struct CheckpointArgs {
    /// Process id of the program (or of its monitor).
    #[arg(conflicts_with = "pool", required_unless_present = "pool")]
    pid: Option<i32>,
    /// The pool the program checkpoints into.
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Give up after this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(Args)]
pub struct InspectArgs {
    /// Pool file.
    #[arg(long)]
    pool: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `10ms`, `1.5s`, `2m`, `250us`, or plain seconds.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 10ms, 1s, 2m)"))?;
    let secs = match unit {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (us, ms, s, m, h)")),
    };
    if !(0.0..1e9).contains(&secs) {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// What a pool file holds, read without opening (or locking) it.
enum PoolState {
    Missing,
    /// A process checkpoint; `finished` once the program ended.
    Process {
        image: Option<Box<TreeImage>>,
        unix_ns: u64,
    },
    Other(String),
}

fn pool_state(path: &Path) -> PoolState {
    if !path.exists() {
        return PoolState::Missing;
    }
    let Ok(report) = kioku_pool::inspect::inspect(path) else {
        return PoolState::Other("unreadable".into());
    };
    match kioku_ckpt::inspect::inspect(path, &report) {
        Ok(Some(r)) => PoolState::Process {
            image: r
                .metadata
                .as_deref()
                .and_then(|m| TreeImage::decode(m).ok())
                .map(Box::new),
            unix_ns: r.checkpoint_unix_ns,
        },
        // A checkpoint pool whose engine never committed (killed while being set up).
        Ok(None) if is_unstarted_ckpt_pool(&report) => PoolState::Process {
            image: None,
            unix_ns: 0,
        },
        _ => PoolState::Other(
            report
                .header
                .as_ref()
                .map(|h| format!("a pool of kind '{}'", h.kind))
                .unwrap_or_else(|| "not a kioku pool".into()),
        ),
    }
}

/// A pool of the checkpoint kind whose live commit holds no roots: created, nothing in it.
fn is_unstarted_ckpt_pool(report: &kioku_pool::inspect::Report) -> bool {
    use kioku_pool::examine::SlotState;
    report.header.as_ref().map(|h| h.kind.as_str()) == Some(kioku_ckpt::POOL_KIND)
        && report.slots.iter().any(|s| {
            s.role == "live"
                && matches!(&s.state, SlotState::Intact { slot, sections }
                    if slot.roots.is_empty() && sections.is_empty())
        })
}

fn busy(path: &Path) -> bool {
    kioku_pool::inspect::inspect(path).is_ok_and(|r| r.held_by.is_some())
}

/// The pool a new run uses.
fn choose_pool(explicit: Option<PathBuf>, program: &str) -> Result<PathBuf> {
    let replaceable = |p: &Path| match kioku_pool::refuse_planted_link(p).map(|()| pool_state(p))? {
        PoolState::Missing => Ok(true),
        // Finished, or killed before its first checkpoint: nothing to lose.
        PoolState::Process { image, .. }
            if image.as_ref().is_none_or(|i| i.finished.is_some()) && !busy(p) =>
        {
            std::fs::remove_file(p).with_context(|| format!("removing {}", p.display()))?;
            Ok(true)
        }
        PoolState::Process { .. } if busy(p) => Ok(false),
        PoolState::Process { image, .. } => {
            if explicit.is_some() {
                bail!(
                    "{} holds a checkpoint of an unfinished run{}; resume it with `kioku restore --pool {}`, or remove it to start afresh",
                    p.display(),
                    image.map(|i| format!(" of {}", program_of(&i))).unwrap_or_default(),
                    p.display()
                )
            }
            Ok(false)
        }
        PoolState::Other(what) => bail!(
            "{} exists and is {what}; refusing to overwrite it — pass another --pool",
            p.display()
        ),
    };
    if let Some(p) = explicit.clone() {
        if !replaceable(&p)? {
            bail!(
                "{} is in use by another kioku monitor; pass another --pool",
                p.display()
            );
        }
        return Ok(p);
    }
    std::fs::create_dir_all(DEFAULT_DIR).with_context(|| format!("creating ./{DEFAULT_DIR}"))?;
    let base = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into());
    for n in 1.. {
        let name = if n == 1 {
            format!("{base}.pool")
        } else {
            format!("{base}-{n}.pool")
        };
        let p = Path::new(DEFAULT_DIR).join(name);
        if replaceable(&p)? {
            return Ok(p);
        }
    }
    unreachable!()
}

fn options(interval: Duration) -> MonitorOptions {
    MonitorOptions {
        interval: (!interval.is_zero()).then_some(interval),
        control: true,
    }
}

pub fn run(a: RunArgs) -> Result<i32> {
    let pool_path = choose_pool(a.pool, &a.command[0])?;
    let mut o = CreateOptions::new(kioku_ckpt::POOL_KIND);
    o.medium = a.medium.map_or(MediumChoice::Auto, MediumChoice::Exactly);
    // A pid namespace of its own, so that a restore gives every process and thread its id back.
    let ns = match Namespace::create() {
        Ok(n) => Some(n),
        // Killed while starting.
        Err(kioku_proc::ProcError::DiedBeforeExec { exit, .. }) => {
            return Ok(match exit {
                Exit::Code(c) => c,
                Exit::Signal { sig, .. } => die_of(sig),
            })
        }
        Err(e) => {
            tracing::warn!("kioku: {e}; the program runs without one: a restore gives it new process ids and cannot bring back processes it starts");
            None
        }
    };
    // The file journal's filter: what the tree changes in files is kept, to be undone at a
    // restore.
    let cmd = TraceeCommand::new(&a.command[0])
        .args(a.command[1..].iter().cloned())
        .inherit_fds(a.inherit_fds)
        .trace_children(true)
        .seccomp(
            kioku_run::journal::Journal::filter(),
            kioku_run::restore::needs_no_new_privs(),
        );
    // Start the program first: a program that does not exist leaves no pool behind.
    let spawned = match &ns {
        Some(ns) => Tracee::spawn_in(ns, cmd, None),
        None => Tracee::spawn(cmd),
    };
    let tracee = match spawned {
        Ok(t) => t,
        Err(
            kioku_proc::ProcError::DiedBeforeExec { exit, .. }
            | kioku_proc::ProcError::Exited { exit, .. },
        ) => {
            return Ok(match exit {
                Exit::Code(c) => c,
                Exit::Signal { sig, .. } => die_of(sig),
            })
        }
        // Killed while being started (its namespace's init with it).
        Err(_) if ns.as_ref().is_some_and(|n| !n.alive()) => return Ok(die_of(libc::SIGKILL)),
        Err(e) => return Err(e.into()),
    };
    let pid = tracee.pid();
    let tree = Tree::new(tracee, ns);
    let pool = Pool::create(&pool_path, &o)?;
    tracing::info!(pool = %pool_path.display(), pid, "kioku run");
    let capturer = match Capturer::new(pool, &tree, true) {
        Ok(c) => c,
        // Killed before it ran an instruction (while its tracker was being set up).
        Err(e) if kioku_run::monitor::program_gone(pid) => {
            tracing::debug!("program died during setup: {e}");
            let exit = tree.processes()[0].kill()?;
            return Ok(match exit {
                Exit::Code(c) => c,
                Exit::Signal { sig, .. } => die_of(sig),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let monitor = Monitor::new(tree, capturer, options(a.interval))?;
    finish(monitor, &pool_path, a.summary, a.summary_json.as_deref())
}

/// The program a tree image runs (its first process's).
fn program_of(i: &TreeImage) -> String {
    i.root_process()
        .or(i.processes.first())
        .map(|p| p.program.path.display().to_string())
        .unwrap_or_default()
}

pub fn restore(a: RestoreArgs) -> Result<i32> {
    let pool_path = match a.pool {
        Some(p) => p,
        None => most_recent()?,
    };
    let pool = Pool::open(
        &pool_path,
        &OpenOptions {
            kind: Some(kioku_ckpt::POOL_KIND.into()),
            ..Default::default()
        },
    )
    .with_context(|| format!("opening {}", pool_path.display()))?;
    let t0 = std::time::Instant::now();
    let r = match kioku_run::restore::restore(pool) {
        Ok(r) => r,
        Err(e @ kioku_run::RunError::DiedDuringRestore { .. }) => {
            eprintln!("kioku: {e}");
            return Ok(die_of(libc::SIGKILL));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(
        pool = %pool_path.display(),
        epoch = r.epoch,
        pid = r.tree.root_pid(),
        ms = t0.elapsed().as_secs_f64() * 1e3,
        "restored"
    );
    if a.summary {
        eprintln!(
            "kioku: restored {} from epoch {} in {:.1} ms ({:.1} MiB written back, {:.1} MiB mapped to fill on first touch), {} processes, pid {}",
            program_of(&r.image),
            r.epoch,
            t0.elapsed().as_secs_f64() * 1e3,
            r.bytes_written as f64 / (1 << 20) as f64,
            r.bytes_lazy as f64 / (1 << 20) as f64,
            r.tree.processes().len(),
            r.tree.root_pid()
        );
    }
    let monitor = Monitor::new(r.tree, r.capturer, options(a.interval))?;
    finish(monitor, &pool_path, a.summary, a.summary_json.as_deref())
}

/// Runs the monitor to the program's end; the exit status to pass on.
fn finish(
    mut monitor: Monitor,
    pool: &Path,
    summary: bool,
    summary_json: Option<&Path>,
) -> Result<i32> {
    ignore_terminal_signals();
    let exit = monitor.run()?;
    let s = monitor.summary();
    if summary {
        eprintln!("{}", describe(s, pool, &exit));
    } else if s.skipped > 0 {
        tracing::warn!(
            "kioku: {} of {} checkpoints were skipped (the one before each stayed the restorable one); the last because: {}",
            s.skipped,
            s.skipped + s.checkpoints,
            s.skipped_because.last().map_or("", |w| w.as_str())
        );
    }
    if let Some(p) = summary_json {
        let v = serde_json::json!({ "pool": pool, "exit": exit.to_string(), "summary": s });
        std::fs::write(p, serde_json::to_vec_pretty(&v)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(match exit {
        Exit::Code(c) => c,
        Exit::Signal { sig, .. } => die_of(sig),
    })
}

/// Dies of signal `sig`, as the program did (a shell then sees the same status); the exit
/// status to use if that does not happen.
fn die_of(sig: i32) -> i32 {
    // SAFETY: resetting a disposition and raising a signal in our own process.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    128 + sig
}

/// The terminal sends SIGINT/SIGQUIT to the program too; the monitor outlives it to pass its
/// exit on.
fn ignore_terminal_signals() {
    // SAFETY: setting dispositions of our own process.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}

fn describe(s: &Summary, pool: &Path, exit: &Exit) -> String {
    let mut stops = s.stop_ms.clone();
    stops.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        stops
            .get(((stops.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let mut out = format!(
        "kioku: program {exit}; {} checkpoints (last epoch {}), stop time median {:.2} ms, max {:.2} ms (counting the {} write-protect faults taken after resumes, {:.2} µs each); {:.1} MiB copied in all; {:.1} MiB of memory captured; pool {}",
        s.checkpoints,
        s.last_epoch,
        pct(0.5),
        pct(1.0),
        s.wp_faults.iter().sum::<u64>(),
        s.wp_fault_us,
        s.copied_bytes as f64 / (1 << 20) as f64,
        s.captured_bytes as f64 / (1 << 20) as f64,
        pool.display()
    );
    if s.skipped > 0 {
        out.push_str(&format!(
            "\nkioku: {} checkpoint{} skipped (the one before stayed the restorable one); the last because: {}",
            s.skipped,
            if s.skipped == 1 { " was" } else { "s were" },
            s.skipped_because.last().map_or("", |w| w.as_str())
        ));
    }
    if let Some(w) = &s.stopped_because {
        out.push_str(&format!("\nkioku: checkpoints stopped early: {w}"));
    }
    out
}

/// The most recent restorable pool under ./.kioku/.
fn most_recent() -> Result<PathBuf> {
    let dir = Path::new(DEFAULT_DIR);
    let mut all = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pool") {
                all.push(p);
            }
        }
    }
    all.sort();
    let mut candidates = Vec::new();
    let mut lines = Vec::new();
    for p in &all {
        let line = match pool_state(p) {
            PoolState::Process {
                image: Some(i),
                unix_ns,
            } => {
                let state = if busy(p) {
                    "in use by a running monitor".to_string()
                } else if let Some(f) = &i.finished {
                    format!("finished ({f})")
                } else {
                    candidates.push((unix_ns, p.clone()));
                    "restorable".to_string()
                };
                format!("  {}  {}  {state}", p.display(), program_of(&i))
            }
            PoolState::Process { image: None, .. } => {
                format!("  {}  no checkpoint yet", p.display())
            }
            PoolState::Other(w) => format!("  {}  {w}", p.display()),
            PoolState::Missing => continue,
        };
        lines.push(line);
    }
    candidates.sort();
    match candidates.pop() {
        Some((_, p)) => Ok(p),
        None if lines.is_empty() => Err(anyhow!(
            "no pool under ./{DEFAULT_DIR}/ to restore; pass --pool PATH"
        )),
        None => Err(anyhow!(
            "no restorable pool under ./{DEFAULT_DIR}/; pass --pool PATH. Pools there:\n{}",
            lines.join("\n")
        )),
    }
}

pub fn checkpoint(a: CheckpointArgs) -> Result<()> {
    let target = match (&a.pool, a.pid) {
        (Some(p), _) => Target::Pool(p),
        (None, Some(pid)) => Target::Pid(pid),
        (None, None) => bail!("give a PID or --pool"),
    };
    let answer = request_checkpoint(target, a.timeout)?;
    println!("{answer}");
    Ok(())
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    let report = kioku_pool::inspect::inspect(&a.pool)
        .with_context(|| format!("reading {}", a.pool.display()))?;
    let ck = kioku_ckpt::inspect::inspect(&a.pool, &report)
        .with_context(|| format!("reading {}", a.pool.display()))?;
    let Some(ck) = ck else {
        bail!(
            "{} holds no process checkpoint ({}); `kioku pool inspect` shows what it is",
            a.pool.display(),
            report
                .header
                .as_ref()
                .map(|h| format!("pool kind '{}'", h.kind))
                .unwrap_or_else(|| "not a kioku pool".into())
        );
    };
    let image = match ck.metadata.as_deref() {
        Some([]) | None => None,
        Some(m) => Some(TreeImage::decode(m)?),
    };
    let stopped = stopped_note(&a.pool, &report);
    if a.json {
        let v = serde_json::json!({
            "pool": a.pool,
            "epoch": ck.epoch,
            "checkpoint_unix_ns": ck.checkpoint_unix_ns,
            "holder_pid": report.held_by,
            "checkpoints_stopped": stopped,
            "image": image,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("pool        {}", a.pool.display());
    let Some(i) = image else {
        println!("no checkpoint yet");
        if let Some(why) = &stopped {
            println!("checkpoints stopped before the first one: {why}");
        }
        return Ok(());
    };
    let when = std::time::UNIX_EPOCH + Duration::from_nanos(ck.checkpoint_unix_ns);
    let ago = std::time::SystemTime::now()
        .duration_since(when)
        .map(|d| format!("{:.1} s ago", d.as_secs_f64()))
        .unwrap_or_default();
    println!(
        "program     {} ({} processes{})",
        program_of(&i),
        i.processes.len(),
        if i.pid_namespace {
            ", in a pid namespace of its own"
        } else {
            ""
        }
    );
    if let Some(root) = i.root_process() {
        println!("arguments   {}", root.argv.join(" "));
    }
    println!("epoch       {} ({ago})", ck.epoch);
    match (&i.finished, report.held_by) {
        (Some(f), _) => println!("state       finished: {f}; nothing to restore"),
        (None, Some(pid)) => println!("state       running under monitor pid {pid}"),
        (None, None) => println!(
            "state       restorable with `kioku restore --pool {}`",
            a.pool.display()
        ),
    }
    if let Some(why) = &stopped {
        println!("checkpoints stopped after this one: {why}");
    }
    for p in &i.processes {
        print_process(p, &i.fds);
    }
    if !i.shared.is_empty() {
        println!("shared memory");
        for s in &i.shared {
            println!(
                "            {:?}  {:.1} KiB held",
                s.kind,
                (s.hi - s.lo) as f64 / 1024.0
            );
        }
    }
    println!("recent checkpoints (epoch, copied, stop)");
    for e in &i.recent {
        println!(
            "            {:>6}  {:>10.2} MiB  {:>8.2} ms",
            e.epoch,
            e.copied_bytes as f64 / (1 << 20) as f64,
            e.stop_us as f64 / 1e3
        );
    }
    Ok(())
}

/// Why the run of the pool stopped taking checkpoints, as the monitor noted it in the pool.
fn stopped_note(path: &Path, report: &kioku_pool::inspect::Report) -> Option<String> {
    use kioku_pool::examine::SlotState;
    use std::os::unix::fs::FileExt;
    let live = report.slots.iter().find(|s| s.role == "live")?;
    let SlotState::Intact { sections, .. } = &live.state else {
        return None;
    };
    let sec = sections
        .iter()
        .find(|s| s.name == kioku_run::capture::NOTE_SECTION)?;
    let f = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact_at(&mut len, sec.offset).ok()?;
    let n = (u64::from_le_bytes(len)).min(sec.len.saturating_sub(8)) as usize;
    let mut text = vec![0u8; n];
    f.read_exact_at(&mut text, sec.offset + 8).ok()?;
    Some(String::from_utf8_lossy(&text).into_owned())
}

fn print_process(p: &kioku_run::ProcessImage, fds: &kioku_run::fds::FdTable) {
    println!(
        "process     {} (parent {}, group {}, session {}): {}",
        p.pid,
        p.ppid,
        p.pgid,
        p.sid,
        match p.zombie {
            Some(z) => format!("ended ({z:?}), not yet reaped by its parent"),
            None => p.program.path.display().to_string(),
        }
    );
    if p.zombie.is_some() {
        return;
    }
    let captured: usize = p.areas.iter().map(|a| a.end - a.start).sum();
    println!(
        "  memory    {} mappings, {} captured areas, {:.1} MiB captured",
        p.vmas.len(),
        p.areas.len(),
        captured as f64 / (1 << 20) as f64
    );
    println!("  threads   {}", p.threads.len());
    for f in fds.procs.get(&p.pid).into_iter().flatten() {
        let what = fds
            .objects
            .get(f.object)
            .map(|o| o.describe())
            .unwrap_or_default();
        println!("  fd {:>3}    {what}", f.fd);
    }
}
