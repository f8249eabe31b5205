//! `kioku ec`: erasure-code a file into self-describing shard files, rebuild it from any
//! `k` of them, and check which shards are damaged. Format and guarantees: docs/ec.md.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kioku_ec::shard::{ShardHeader, HEADER_LEN};
use kioku_ec::stream::{self, ShardInput};
use kioku_ec::{Codec, EcError, Engine};
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter, IsTerminal, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Erasure-code files with Reed–Solomon: any K of K+M shard files rebuild the file.
#[derive(clap::Args, Debug)]
pub struct EcArgs {
    #[command(subcommand)]
    cmd: EcCommand,
}

#[derive(clap::Subcommand, Debug)]
enum EcCommand {
    /// Split FILE into K data and M parity shard files (FILE.000.kec, FILE.001.kec, ...).
    Encode {
        /// Number of data shards (1..=255).
        #[arg(long)]
        k: usize,
        /// Number of parity shards, the number of shard losses survived (k + m <= 256).
        #[arg(long)]
        m: usize,
        /// The file to encode (streamed; any size).
        file: PathBuf,
        /// Directory for the shard files (default: next to FILE).
        #[arg(short = 'o', long)]
        out_dir: Option<PathBuf>,
        /// Bytes per shard per stripe (default: about 64 MiB of buffers in all).
        #[arg(long)]
        stripe_unit: Option<usize>,
        /// Overwrite existing shard files.
        #[arg(long)]
        force: bool,
    },
    /// Rebuild the original file from any K intact shard files and verify its checksum.
    Decode {
        /// Shard files (any order; damaged ones are detected and skipped).
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Where to write the rebuilt file.
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// Overwrite OUTPUT if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Check shard files and report which are damaged, missing or inconsistent.
    Verify {
        /// Shard files of one encoding.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `kioku ec`.
pub fn run(args: EcArgs) -> Result<()> {
    match args.cmd {
        EcCommand::Encode {
            k,
            m,
            file,
            out_dir,
            stripe_unit,
            force,
        } => encode(k, m, &file, out_dir.as_deref(), stripe_unit, force),
        EcCommand::Decode {
            shards,
            output,
            force,
        } => decode(&shards, &output, force),
        EcCommand::Verify { shards, json } => verify(&shards, json),
    }
}

fn progress(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() || total < (64 << 20) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Path of shard `index` of `file`.
pub fn shard_path(file: &Path, out_dir: Option<&Path>, index: usize) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "data".into());
    let dir = out_dir
        .map(Path::to_path_buf)
        .or_else(|| file.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    dir.join(format!("{name}.{index:03}.kec"))
}

fn encode(
    k: usize,
    m: usize,
    file: &Path,
    out_dir: Option<&Path>,
    unit: Option<usize>,
    force: bool,
) -> Result<()> {
    let codec = Codec::new(k, m).context("choose --k and --m")?;
    let input = File::open(file).with_context(|| format!("open {}", file.display()))?;
    let md = input
        .metadata()
        .with_context(|| format!("stat {}", file.display()))?;
    let len = md.len();
    // Shards are as readable as the file they encode, never more (a 0600 secret must not
    // become world-readable shards).
    let mode = md.permissions().mode() & 0o666;
    let unit = unit.unwrap_or_else(|| stream::default_stripe_unit(k, m));
    if unit == 0 || unit > u32::MAX as usize {
        bail!("--stripe-unit must be between 1 and {}", u32::MAX);
    }
    if let Some(d) = out_dir {
        fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
    }
    let paths: Vec<PathBuf> = (0..k + m).map(|i| shard_path(file, out_dir, i)).collect();
    let mut outs = Vec::with_capacity(k + m);
    for p in &paths {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .create_new(!force)
            .truncate(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(p)
            .with_context(|| {
                format!(
                    "create {} (use --force to overwrite shard files)",
                    p.display()
                )
            })?;
        // An existing shard overwritten under --force keeps no wider mode than the input's.
        f.set_permissions(fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {}", p.display()))?;
        outs.push(BufWriter::with_capacity(1 << 20, f));
    }
    tracing::info!(k, m, engine = %codec.engine(), bytes = len, "encoding");
    let pb = progress(len, "encode");
    let res = stream::encode_stream(
        &codec,
        BufReader::with_capacity(1 << 20, input),
        &mut outs,
        unit,
        &mut |n| pb.set_position(n),
    );
    pb.finish_and_clear();
    let headers = match res {
        Ok(h) => h,
        Err(e) => {
            drop(outs);
            for p in &paths {
                let _ = fs::remove_file(p);
            }
            return Err(e).context(format!("encode {}", file.display()));
        }
    };
    for o in outs {
        let f = o.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
    }
    let h = headers[0];
    eprintln!(
        "wrote {} shards ({} data + {} parity) of {} bytes each for {} bytes; any {} rebuild it",
        k + m,
        k,
        m,
        h.shard_len + HEADER_LEN as u64,
        h.original_len,
        k
    );
    for p in &paths {
        println!("{}", p.display());
    }
    Ok(())
}

/// A shard file whose header parsed.
struct Candidate {
    path: PathBuf,
    header: ShardHeader,
}

/// Reads headers; returns the usable candidates of the most common encoding, one per
/// index, and a note for every file left out.
fn candidates(paths: &[PathBuf]) -> (Vec<Candidate>, Vec<(PathBuf, String)>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for p in paths {
        let r = File::open(p)
            .map_err(EcError::from)
            .and_then(|mut f| stream::read_header(&mut f));
        match r {
            Ok(header) => ok.push(Candidate {
                path: p.clone(),
                header,
            }),
            Err(e) => bad.push((p.clone(), e.to_string())),
        }
    }
    // The encoding most headers agree on wins; the rest are inconsistent.
    let best = ok
        .iter()
        .max_by_key(|c| {
            ok.iter()
                .filter(|o| o.header.same_encoding(&c.header).is_none())
                .count()
        })
        .map(|c| c.header);
    let mut seen = [false; 256];
    let mut keep = Vec::new();
    for c in ok {
        let Some(b) = best else { break };
        if let Some(field) = b.same_encoding(&c.header) {
            bad.push((
                c.path,
                format!("disagrees with the other shards on {field}"),
            ));
        } else if seen[c.header.index as usize] {
            bad.push((c.path, format!("duplicate of shard {}", c.header.index)));
        } else {
            seen[c.header.index as usize] = true;
            keep.push(c);
        }
    }
    keep.sort_by_key(|c| c.header.index);
    (keep, bad)
}

fn open_inputs(cands: &[Candidate]) -> Result<Vec<ShardInput<BufReader<File>>>> {
    cands
        .iter()
        .map(|c| {
            let mut f =
                File::open(&c.path).with_context(|| format!("open {}", c.path.display()))?;
            f.seek(SeekFrom::Start(HEADER_LEN as u64))?;
            Ok(ShardInput {
                header: c.header,
                reader: BufReader::with_capacity(1 << 20, f),
            })
        })
        .collect()
}

fn decode(paths: &[PathBuf], output: &Path, force: bool) -> Result<()> {
    if output.exists() && !force {
        bail!("{} exists: use --force to overwrite it", output.display());
    }
    let (mut cands, bad) = candidates(paths);
    for (p, why) in &bad {
        tracing::warn!("skipping {}: {why}", p.display());
    }
    let Some(first) = cands.first().map(|c| c.header) else {
        bail!(
            "no usable shard among the {} given: nothing to decode",
            paths.len()
        );
    };
    let k = first.k as usize;
    tracing::info!(k, m = first.m, engine = %Engine::best(), "decoding");
    let tmp = output.with_file_name(format!(
        ".{}.kioku-tmp-{}",
        output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = loop {
        if cands.len() < k {
            break Err(anyhow::anyhow!(
                "only {} intact shards of the {} needed: find more shards of this file",
                cands.len(),
                k
            ));
        }
        let mut inputs = open_inputs(&cands)?;
        // The rebuilt file is as readable as its shards; a link planted at the temporary
        // name is not followed.
        let mode = fs::metadata(&cands[0].path)
            .map(|m| m.permissions().mode() & 0o666)
            .unwrap_or(0o600);
        let out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .with_context(|| format!("create {}", tmp.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, out);
        let pb = progress(first.original_len, "decode");
        let r = stream::decode_stream(&mut inputs, &mut w, &mut |n| pb.set_position(n));
        pb.finish_and_clear();
        match r {
            Ok(used) => {
                let f = w.into_inner().map_err(|e| e.into_error())?;
                f.sync_all()?;
                break Ok(used);
            }
            Err(EcError::PayloadChecksum { index } | EcError::Truncated { index }) => {
                let pos = cands
                    .iter()
                    .position(|c| c.header.index as usize == index)
                    .expect("used shard is a candidate");
                let c = cands.remove(pos);
                tracing::warn!(
                    "shard {} ({}) is damaged; retrying without it",
                    index,
                    c.path.display()
                );
            }
            Err(e) => break Err(anyhow::Error::from(e)),
        }
    };
    match result {
        Ok(used) => {
            fs::rename(&tmp, output)
                .with_context(|| format!("rename into {}", output.display()))?;
            eprintln!(
                "rebuilt {} ({} bytes, checksum ok) from shards {:?}",
                output.display(),
                first.original_len,
                used
            );
            Ok(())
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e.context(format!("decode into {}", output.display())))
        }
    }
}

#[derive(serde::Serialize)]
struct ShardReport {
    path: String,
    index: Option<u16>,
    ok: bool,
    error: Option<String>,
}

#[derive(serde::Serialize)]
struct VerifyReport {
    k: Option<u16>,
    m: Option<u16>,
    original_len: Option<u64>,
    shards: Vec<ShardReport>,
    damaged: usize,
    missing: Vec<usize>,
    recoverable: bool,
    file_checksum_ok: Option<bool>,
}

fn verify(paths: &[PathBuf], json: bool) -> Result<()> {
    let mut reports = Vec::new();
    let mut sound = Vec::new();
    for p in paths {
        let r = File::open(p).map_err(EcError::from).and_then(|f| {
            let len = f.metadata().map(|md| md.len()).unwrap_or(0);
            let pb = progress(len, "verify");
            let r = stream::verify_shard(BufReader::with_capacity(1 << 20, f), &mut |n| pb.inc(n));
            pb.finish_and_clear();
            r
        });
        match r {
            Ok(h) => {
                sound.push(p.clone());
                reports.push(ShardReport {
                    path: p.display().to_string(),
                    index: Some(h.index),
                    ok: true,
                    error: None,
                });
            }
            Err(e) => reports.push(ShardReport {
                path: p.display().to_string(),
                index: None,
                ok: false,
                error: Some(e.to_string()),
            }),
        }
    }
    // Among sound shards: consistency and duplicates.
    let (cands, bad) = candidates(&sound);
    for (p, why) in bad {
        let s = p.display().to_string();
        if let Some(r) = reports.iter_mut().find(|r| r.path == s && r.ok) {
            r.ok = false;
            r.error = Some(why);
        }
    }
    let head = cands.first().map(|c| c.header);
    let (mut missing, mut recoverable, mut file_ok) = (Vec::new(), false, None);
    if let Some(h) = head {
        let n = (h.k + h.m) as usize;
        missing = (0..n)
            .filter(|i| !cands.iter().any(|c| c.header.index as usize == *i))
            .collect();
        recoverable = cands.len() >= h.k as usize;
        if recoverable {
            let mut inputs = open_inputs(&cands)?;
            let pb = progress(h.original_len, "check");
            let r =
                stream::decode_stream(&mut inputs, std::io::sink(), &mut |x| pb.set_position(x));
            pb.finish_and_clear();
            file_ok = Some(r.is_ok());
            if let Err(e) = r {
                tracing::warn!("rebuilding from the sound shards failed: {e}");
            }
        }
    }
    let damaged = reports.iter().filter(|r| !r.ok).count();
    let report = VerifyReport {
        k: head.map(|h| h.k),
        m: head.map(|h| h.m),
        original_len: head.map(|h| h.original_len),
        shards: reports,
        damaged,
        missing,
        recoverable: recoverable && file_ok == Some(true),
        file_checksum_ok: file_ok,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for r in &report.shards {
            let idx = r.index.map_or("-".to_string(), |i| i.to_string());
            match &r.error {
                None => println!("ok       {idx:>4}  {}", r.path),
                Some(e) => println!("DAMAGED  {idx:>4}  {}: {e}", r.path),
            }
        }
        if let (Some(k), Some(m)) = (report.k, report.m) {
            if !report.missing.is_empty() {
                println!("missing indices: {:?}", report.missing);
            }
            println!(
                "k={k} m={m}: {} of {} shards sound; {}",
                cands.len(),
                k + m,
                match report.file_checksum_ok {
                    Some(true) => "file recoverable, rebuilt checksum ok",
                    Some(false) => "rebuilt file FAILS its checksum",
                    None => "NOT recoverable: too few sound shards",
                }
            );
        } else {
            println!("no sound shard");
        }
    }
    if report.damaged > 0 || !report.recoverable {
        bail!(
            "{} damaged shard file(s){}",
            report.damaged,
            if report.recoverable {
                "; the file is still recoverable"
            } else {
                "; the file is NOT recoverable"
            }
        );
    }
    Ok(())
}
