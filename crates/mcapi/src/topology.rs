//! The job's topology: which nodes exist, how they reach each other, the job's secret and the
//! limits every node applies. Read like MPI's settings: a file of `key = value` lines (named by
//! `KIOKU_MCAPI_TOPOLOGY`, or given to `mcapi_initialize`), then `KIOKU_MCAPI_<KEY>`
//! environment variables, which win. Keys are listed in `docs/mcapi.md`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How nodes of the job talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// Processes of one machine: lock-free rings in shared memory.
    Shm,
    /// Hosts: one TCP connection per pair of nodes.
    Tcp,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopologyError {
    #[error("{path}: {detail}")]
    File { path: String, detail: String },
    #[error("{source_name} line {line}: `{text}` is not `key = value`")]
    Syntax {
        source_name: String,
        line: usize,
        text: String,
    },
    #[error("{key} = {value:?}: {why}")]
    Value {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("unknown key {0:?} (see docs/mcapi.md for the keys)")]
    UnknownKey(String),
    #[error("the topology has no nodes: set `nodes = N` (or KIOKU_MCAPI_NODES)")]
    NoNodes,
    #[error("the tcp transport needs a per-job secret: set `secret = <32+ hex digits>` or `secret_file = PATH` (KIOKU_MCAPI_SECRET / KIOKU_MCAPI_SECRET_FILE)")]
    NoSecret,
    #[error("secret file {path}: {why}")]
    SecretFile { path: String, why: String },
}

/// The settings every node of a job must share.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Name of the job: shared-memory segments and the TCP handshake carry it.
    pub job: String,
    pub transport: TransportKind,
    /// The job's MCAPI domain (one domain per job).
    pub domain: u32,
    /// Node ids are 0..nodes.
    pub nodes: u32,
    /// TCP: where node i listens (`addresses[i]`).
    pub addresses: Vec<SocketAddr>,
    /// The per-job secret peers prove they hold (HMAC-SHA256 challenge-response).
    pub secret: Vec<u8>,
    /// Receive queue of an endpoint, per sending node: entries a sender may have unconsumed.
    pub queue_depth: u32,
    /// The same in bytes (a single message larger than this still passes when the queue is empty).
    pub queue_bytes: u64,
    /// Bytes of each shared-memory ring (a power of two).
    pub shm_ring_bytes: u64,
    /// Where shared-memory segments are created.
    pub shm_dir: PathBuf,
    /// How long a blocking call spins before it sleeps.
    pub spin: Duration,
    /// Requests a node may have outstanding.
    pub max_requests: usize,
    /// Endpoints a node may have.
    pub max_endpoints: usize,
    /// Packet buffers a node may hold unreleased.
    pub max_packet_buffers: usize,
    /// TCP: a peer silent this long (keepalive + user timeout) is declared dead.
    pub tcp_dead_after: Duration,
}

pub const DEFAULT_BASE_PORT: u16 = 47_000;

impl Topology {
    /// A shared-memory job of `nodes` processes.
    pub fn shm(job: &str, nodes: u32) -> Topology {
        Topology {
            job: job.to_string(),
            transport: TransportKind::Shm,
            domain: 0,
            nodes,
            addresses: Vec::new(),
            secret: default_shm_secret(job),
            queue_depth: 64,
            queue_bytes: 4 << 20,
            shm_ring_bytes: 1 << 20,
            shm_dir: PathBuf::from("/dev/shm"),
            spin: Duration::from_micros(50),
            max_requests: 4096,
            max_endpoints: 1024,
            max_packet_buffers: 1024,
            tcp_dead_after: Duration::from_secs(10),
        }
    }

    /// A TCP job whose node i listens at `addresses[i]`.
    pub fn tcp(job: &str, addresses: Vec<SocketAddr>, secret: &[u8]) -> Topology {
        let mut t = Topology::shm(job, addresses.len() as u32);
        t.transport = TransportKind::Tcp;
        t.addresses = addresses;
        t.secret = secret.to_vec();
        t
    }

    /// From `KIOKU_MCAPI_TOPOLOGY` (if set) or `file` (if given), then `KIOKU_MCAPI_*`.
    pub fn load(file: Option<&Path>) -> Result<Topology, TopologyError> {
        let mut kv: Vec<(String, String, String)> = Vec::new();
        let env_file = std::env::var_os("KIOKU_MCAPI_TOPOLOGY").filter(|v| !v.is_empty());
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| env_file.map(PathBuf::from));
        if let Some(path) = &file {
            let text = std::fs::read_to_string(path).map_err(|e| TopologyError::File {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
            kv.extend(parse_lines(&path.display().to_string(), &text)?);
        }
        for (name, value) in std::env::vars() {
            if let Some(key) = name.strip_prefix("KIOKU_MCAPI_") {
                let key = key.to_ascii_lowercase();
                if key == "topology" || key == "spin_us_bench" {
                    continue;
                }
                kv.push((key, value, name.clone()));
            }
        }
        Topology::from_pairs(&kv)
    }

    /// Parses `key = value` text (tests and tools).
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        Topology::from_pairs(&parse_lines("topology", text)?)
    }

    fn from_pairs(kv: &[(String, String, String)]) -> Result<Topology, TopologyError> {
        let mut t = Topology::shm("kioku", 0);
        t.secret.clear();
        let mut host: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut base_port = DEFAULT_BASE_PORT;
        let mut explicit: Vec<(u32, SocketAddr)> = Vec::new();
        let mut secret_file: Option<String> = None;
        let bad = |key: &str, value: &str, why: &'static str| TopologyError::Value {
            key: key.to_string(),
            value: value.to_string(),
            why,
        };
        for (key, value, _) in kv {
            let v = value.trim();
            let num = |why| v.parse::<u64>().map_err(|_| bad(key, v, why));
            match key.as_str() {
                "job" => {
                    if v.is_empty()
                        || v.len() > 64
                        || !v
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    {
                        return Err(bad(key, v, "1 to 64 of [A-Za-z0-9._-]"));
                    }
                    t.job = v.to_string();
                }
                "transport" => {
                    t.transport = match v {
                        "shm" => TransportKind::Shm,
                        "tcp" => TransportKind::Tcp,
                        _ => return Err(bad(key, v, "shm or tcp")),
                    }
                }
                "domain" => t.domain = num("a domain number")?.min(u64::from(u32::MAX)) as u32,
                "nodes" => {
                    let n = num("a node count")?;
                    if n == 0 || n > u64::from(crate::ids::MAX_NODE) + 1 {
                        return Err(bad(key, v, "1 to 4096 nodes"));
                    }
                    t.nodes = n as u32;
                }
                "host" => host = v.parse().map_err(|_| bad(key, v, "an IP address"))?,
                "base_port" => {
                    base_port = v.parse().map_err(|_| bad(key, v, "a TCP port"))?;
                }
                "addresses" => {
                    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        let (id, addr) = item
                            .split_once('=')
                            .ok_or_else(|| bad(key, v, "a list of id=ip:port"))?;
                        let id: u32 = id
                            .trim()
                            .parse()
                            .map_err(|_| bad(key, v, "a list of id=ip:port"))?;
                        let addr: SocketAddr = addr
                            .trim()
                            .parse()
                            .map_err(|_| bad(key, v, "a list of id=ip:port"))?;
                        explicit.retain(|(i, _)| *i != id);
                        explicit.push((id, addr));
                    }
                }
                "secret" => {
                    t.secret = decode_hex(v)
                        .filter(|s| s.len() >= 16)
                        .ok_or_else(|| bad(key, "(hidden)", "at least 32 hex digits"))?;
                }
                "secret_file" => secret_file = Some(v.to_string()),
                "queue_depth" => {
                    let n = num("an entry count")?;
                    if !(1..=65536).contains(&n) {
                        return Err(bad(key, v, "1 to 65536"));
                    }
                    t.queue_depth = n as u32;
                }
                "queue_bytes" => {
                    t.queue_bytes = num("a byte count")?.max(4096);
                }
                "shm_ring_bytes" => {
                    let n = num("a byte count")?;
                    if !n.is_power_of_two() || !(4096..=(1 << 30)).contains(&n) {
                        return Err(bad(key, v, "a power of two from 4096 to 1 GiB"));
                    }
                    t.shm_ring_bytes = n;
                }
                "shm_dir" => t.shm_dir = PathBuf::from(v),
                "spin_us" => t.spin = Duration::from_micros(num("microseconds")?),
                "max_requests" => t.max_requests = (num("a count")? as usize).max(1),
                "max_endpoints" => t.max_endpoints = (num("a count")? as usize).max(1),
                "max_packet_buffers" => t.max_packet_buffers = (num("a count")? as usize).max(1),
                "tcp_dead_after_ms" => {
                    t.tcp_dead_after = Duration::from_millis(num("milliseconds")?.max(100))
                }
                "log" => {}
                other => return Err(TopologyError::UnknownKey(other.to_string())),
            }
        }
        if let Some(path) = secret_file {
            t.secret = read_secret_file(Path::new(&path))?;
        }
        if t.nodes == 0 {
            t.nodes = explicit.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
        }
        if t.nodes == 0 {
            return Err(TopologyError::NoNodes);
        }
        if t.transport == TransportKind::Tcp {
            if t.secret.is_empty() {
                return Err(TopologyError::NoSecret);
            }
            t.addresses = (0..t.nodes)
                .map(|i| {
                    explicit
                        .iter()
                        .find(|(id, _)| *id == i)
                        .map(|(_, a)| *a)
                        .unwrap_or_else(|| {
                            SocketAddr::new(host, base_port.saturating_add(i as u16))
                        })
                })
                .collect();
        }
        if t.secret.is_empty() {
            t.secret = default_shm_secret(&t.job);
        }
        Ok(t)
    }

    /// A digest of what every node must agree on (checked when two nodes first meet).
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"kioku-mcapi-topology-v1\0");
        h.update(self.job.as_bytes());
        h.update([0]);
        h.update(self.domain.to_le_bytes());
        h.update(self.nodes.to_le_bytes());
        h.update([self.transport as u8]);
        h.update(self.queue_depth.to_le_bytes());
        h.update(self.queue_bytes.to_le_bytes());
        h.update(self.shm_ring_bytes.to_le_bytes());
        for a in &self.addresses {
            h.update(a.to_string().as_bytes());
            h.update([0]);
        }
        h.finalize().into()
    }
}

/// Shared memory without a secret: the segments are 0600 (only our uid reaches them), so the
/// secret then only ties a segment to its job.
fn default_shm_secret(job: &str) -> Vec<u8> {
    format!("kioku-mcapi-shm:{job}").into_bytes()
}

fn parse_lines(name: &str, text: &str) -> Result<Vec<(String, String, String)>, TopologyError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line.split_once('=').ok_or_else(|| TopologyError::Syntax {
            source_name: name.to_string(),
            line: i + 1,
            text: line.to_string(),
        })?;
        out.push((
            k.trim().to_ascii_lowercase(),
            v.trim().to_string(),
            format!("{name}:{}", i + 1),
        ));
    }
    Ok(out)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A secret file: hex digits (whitespace ignored), owned by us and not readable by others.
fn read_secret_file(path: &Path) -> Result<Vec<u8>, TopologyError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let err = |why: String| TopologyError::SecretFile {
        path: path.display().to_string(),
        why,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| err(e.to_string()))?;
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(err(format!(
            "mode {:o} lets others read it: chmod 600 it",
            meta.mode() & 0o777
        )));
    }
    let text = std::io::read_to_string(f).map_err(|e| err(e.to_string()))?;
    let hex: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    decode_hex(&hex)
        .filter(|s| s.len() >= 16)
        .ok_or_else(|| err("it must hold at least 32 hex digits".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_with_defaults_and_explicit_addresses() {
        let t = Topology::parse(
            "job = j1\ntransport = tcp\nnodes = 3\nsecret = 00112233445566778899aabbccddeeff\n\
             addresses = 2=10.0.0.2:9000 # the third host\n",
        )
        .unwrap();
        assert_eq!(t.nodes, 3);
        assert_eq!(t.addresses[0], "127.0.0.1:47000".parse().unwrap());
        assert_eq!(t.addresses[1], "127.0.0.1:47001".parse().unwrap());
        assert_eq!(t.addresses[2], "10.0.0.2:9000".parse().unwrap());
        assert_eq!(t.secret.len(), 16);
    }

    #[test]
    fn refuses_bad_input_with_the_key_named() {
        assert!(matches!(
            Topology::parse("transport = tcp\nnodes = 2\n"),
            Err(TopologyError::NoSecret)
        ));
        assert!(matches!(
            Topology::parse("nodes = 2\nbogus = 1\n"),
            Err(TopologyError::UnknownKey(k)) if k == "bogus"
        ));
        assert!(matches!(
            Topology::parse("nodes = 2\nshm_ring_bytes = 5000\n"),
            Err(TopologyError::Value { .. })
        ));
        assert!(matches!(
            Topology::parse("nodes 2\n"),
            Err(TopologyError::Syntax { line: 1, .. })
        ));
        assert!(matches!(
            Topology::parse("job = a\n"),
            Err(TopologyError::NoNodes)
        ));
    }
}
