//! `kioku-cache`: the server, with memcached's flags where they mean the same (-p, -U 0, -m,
//! -c, -t, -l, -I, -M, -C, -f, -F, -b, -v), so that scripts written for memcached keep working.
//! Its own binary rather than a `kioku` subcommand: memcached's one-letter flags would clash
//! with the `kioku` command line's, and the server pulls in nothing the rest of kioku needs.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use clap::Parser;
use kioku_cache::{
    page_size_for, restore_store, Cache, Checkpointer, HotPlacement, Mapping, PlacementOptions,
    Server, Settings, Slabs, Store,
};

#[derive(Parser, Debug)]
#[command(name = "kioku-cache", version = kioku_cache::VERSION, about = "memcached-compatible cache (kioku)")]
struct Args {
    /// TCP port to listen on (0: a free port, printed at start).
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// UDP port: only 0 (off) is accepted; kioku-cache has no UDP protocol.
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,
    /// Interface to listen on (default 127.0.0.1; give 0.0.0.0 to serve other hosts).
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1")]
    listen: IpAddr,
    /// Item memory in megabytes.
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    memory_mb: usize,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    conn_limit: usize,
    /// Worker threads.
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    threads: usize,
    /// Largest item (value) size, with k or m suffix (1k ..= 1024m).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    max_item_size: String,
    /// Return an error when memory is full instead of evicting.
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// Disable cas (accepted for compatibility; cas uniques are still kept).
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// Chunk size growth factor of the slab classes.
    #[arg(short = 'f', long = "slab-growth-factor", default_value_t = 1.25)]
    factor: f64,
    /// Refuse flush_all.
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush: bool,
    /// Listen queue length.
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    backlog: i32,
    /// Keep the items in this kioku checkpoint pool and restart warm from its last checkpoint
    /// (created if missing; the same -m, -I and -f are needed to reopen it).
    #[arg(long = "pool")]
    pool: Option<std::path::PathBuf>,
    /// Seconds between checkpoints with --pool (0: only on SIGUSR1 and at SIGTERM/SIGINT).
    #[arg(long = "checkpoint-interval", default_value_t = 10)]
    checkpoint_interval: u64,
    /// Megabytes of item memory kept as the hot area: hot items are moved there, onto huge
    /// pages, and slab pages hot as a whole are promoted (0: off; not with --pool).
    #[arg(long = "hot-mb", default_value_t = 0)]
    hot_mb: usize,
    /// Verbose (repeat for more).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
}

fn parse_size(s: &str) -> anyhow::Result<usize> {
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    let n: usize = digits
        .parse()
        .with_context(|| format!("-I {s}: not a size; use e.g. 512k or 2m"))?;
    let size = n * mult;
    if !(1 << 10..=1 << 30).contains(&size) {
        bail!("-I {s}: the item size must be between 1k and 1024m");
    }
    Ok(size)
}

fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let level = match args.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if args.udp_port != 0 {
        bail!("-U {}: kioku-cache serves no UDP (memcached's UDP protocol is an amplification risk); use -U 0", args.udp_port);
    }
    if args.threads == 0 || args.conn_limit == 0 || args.memory_mb == 0 {
        bail!("-t, -c and -m must be at least 1");
    }
    if !(args.factor > 1.0 && args.factor <= 4.0) {
        bail!(
            "-f {}: the growth factor must be above 1 and at most 4",
            args.factor
        );
    }
    let item_size_max = parse_size(&args.max_item_size)?;
    let page = page_size_for(item_size_max);
    let memory_limit = args.memory_mb << 20;
    if memory_limit < page {
        bail!(
            "-m {}: less than one slab page ({} MiB for -I {}); raise -m",
            args.memory_mb,
            page >> 20,
            args.max_item_size
        );
    }
    let len = memory_limit / page * page;
    if args.hot_mb > 0 && args.pool.is_some() {
        bail!("--hot-mb with --pool: the checkpoint engine write-protects the item memory with a userfaultfd, and the kernel refuses to collapse such memory into huge pages; drop one of them");
    }
    let evictions = !args.disable_evictions;
    let t0 = std::time::Instant::now();
    let mut mapping = None;
    let mut checkpointer = None;
    let mut restored_items = None;
    let mut recovered_in = std::time::Duration::ZERO;
    let store = match &args.pool {
        None => {
            let m = Mapping::anonymous(len).context("cannot map the item memory; lower -m")?;
            let mut slabs = Slabs::new(m.memory(), page, args.factor);
            if args.hot_mb > 0 {
                let pages = (args.hot_mb << 20).div_ceil(page) as u32;
                slabs.reserve_hot(pages).with_context(|| {
                    format!("--hot-mb {}: the hot area must be at least one slab page ({} MiB) and less than -m", args.hot_mb, page >> 20)
                })?;
            }
            let store = Store::new(slabs, evictions);
            mapping = Some(m);
            store
        }
        Some(path) => {
            let interval = (args.checkpoint_interval > 0)
                .then(|| std::time::Duration::from_secs(args.checkpoint_interval));
            let opened = Checkpointer::open(path, len, interval)?;
            recovered_in = t0.elapsed();
            let store = match opened.restored {
                Some(meta) => {
                    let store = restore_store(
                        path,
                        opened.memory,
                        &meta,
                        page,
                        args.factor,
                        evictions,
                        kioku_cache::now(),
                    )?;
                    restored_items = Some(store.len());
                    store
                }
                None => Store::new(Slabs::new(opened.memory, page, args.factor), evictions),
            };
            checkpointer = Some(opened.checkpointer);
            store
        }
    };
    let restore_time = t0.elapsed();
    let settings = Settings {
        memory_limit,
        item_size_max,
        max_connections: args.conn_limit,
        threads: args.threads,
        port: args.port,
        interface: args.listen.to_string(),
        growth_factor: args.factor,
        evictions: !args.disable_evictions,
        cas_enabled: !args.disable_cas,
        flush_enabled: !args.disable_flush,
    };
    raise_fd_limit(args.conn_limit as u64 + 64);
    let mut cache = Cache::new(store, settings);
    cache.pooled = checkpointer.is_some();
    if let Some(n) = restored_items {
        cache
            .persist
            .restored_items
            .store(n as u64, std::sync::atomic::Ordering::Relaxed);
        cache.persist.restore_us.store(
            restore_time.as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let _ = writeln!(
            std::io::stdout(),
            "kioku-cache restored {n} items from {} in {:.3} s (pool recovery {:.3} s, index rebuild {:.3} s; cpu {:.3} s)",
            args.pool.as_ref().expect("pooled").display(),
            restore_time.as_secs_f64(),
            recovered_in.as_secs_f64(),
            (restore_time - recovered_in).as_secs_f64(),
            cpu_seconds()
        );
    }
    let cache = Arc::new(cache);
    let _placement = if args.hot_mb > 0 {
        Some(HotPlacement::start(
            cache.clone(),
            PlacementOptions::default(),
        )?)
    } else {
        None
    };
    if let Some(cp) = checkpointer {
        cp.attach(cache.clone());
        handle_signals(cp)?;
    }
    let server = Server::bind(cache, SocketAddr::new(args.listen, args.port), args.backlog)?;
    let addr = server.local_addr()?;
    println!(
        "kioku-cache {} listening on {addr} (TCP only)",
        kioku_cache::VERSION
    );
    std::io::stdout().flush()?;
    tracing::info!("listening on {addr}");
    server.run()?;
    drop(mapping);
    Ok(())
}

/// SIGUSR1: checkpoint now. SIGTERM/SIGINT: a last checkpoint, then exit (memcached -e's clean
/// shutdown; a crash instead restarts from the last checkpoint).
fn handle_signals(cp: Checkpointer) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGTERM, SIGINT])
        .context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("kioku-cache-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGUSR1 {
                    cp.request();
                    continue;
                }
                match cp.checkpoint() {
                    Ok(epoch) => eprintln!("kioku-cache: checkpoint {epoch} taken; exiting"),
                    Err(e) => eprintln!("kioku-cache: last checkpoint failed: {e}; exiting"),
                }
                std::process::exit(0);
            }
        })?;
    Ok(())
}

/// CPU time (user and system, all threads) the process has used so far: the restore's cost
/// regardless of what else the machine runs.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we pass; zeroed is a valid initial value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}
