//! Configuration: a file of `key = value` lines (its path given to `kioku_group_init`), then
//! the environment (`KIOKU_<KEY>`, which wins), then defaults.
//!
//! | key | env | default | meaning |
//! |---|---|---|---|
//! | `dir` | `KIOKU_DIR` | `.kioku/group` | where each rank's pool lives (node-local storage: /dev/shm, a pmem mount) |
//! | `name` | `KIOKU_NAME` | `job` | pool file names: `<dir>/<name>.<rank>.pool` |
//! | `medium` | `KIOKU_MEDIUM` | `auto` | `auto`, `dax`, `file`, `shm` |
//! | `group_size` | `KIOKU_GROUP_SIZE` | 8 | ranks per group (the job's ranks are cut into groups of about this size) |
//! | `parity` | `KIOKU_PARITY` | 2 | m: lost ranks per group the `rs` level rebuilds |
//! | `levels` | `KIOKU_LEVELS` | `rs` | remote levels kept besides `local`: `partner`, `rs`, or both (`partner,rs`) |
//! | `segment_pages` | `KIOKU_SEGMENT_PAGES` | 256 | pages per pipeline step |
//! | `full` | `KIOKU_FULL` | 0 | 1: every checkpoint sends and encodes whole images (the baseline benchmarks compare with) |
//! | `async` | `KIOKU_ASYNC` | `auto` | encode remote levels in the background: `auto` (when MPI was initialised with `MPI_THREAD_MULTIPLE`), `1` (required), `0` (never) |
//! | `flight_mib` | `KIOKU_FLIGHT_MIB` | 32 | MiB of messages an encoding may have in flight per rank |

use crate::error::{GroupError, Result};
use kioku_pool::{MediumChoice, MediumKind};
use std::path::PathBuf;

/// Whether remote levels are encoded in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncMode {
    /// When MPI allows it (`MPI_THREAD_MULTIPLE`).
    Auto,
    /// Always (refused at init when MPI does not allow it).
    On,
    /// Never: encoding happens inside the checkpoint call.
    Off,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub dir: PathBuf,
    pub name: String,
    pub medium: MediumChoice,
    pub group_size: usize,
    pub parity: usize,
    pub partner: bool,
    pub rs: bool,
    pub segment_pages: usize,
    pub full: bool,
    pub async_mode: AsyncMode,
    pub flight_mib: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dir: PathBuf::from(".kioku/group"),
            name: "job".into(),
            medium: MediumChoice::Auto,
            group_size: 8,
            parity: 2,
            partner: false,
            rs: true,
            segment_pages: 256,
            full: false,
            async_mode: AsyncMode::Auto,
            flight_mib: 32,
        }
    }
}

const KEYS: &[&str] = &[
    "dir",
    "name",
    "medium",
    "group_size",
    "parity",
    "levels",
    "segment_pages",
    "full",
    "async",
    "flight_mib",
];

impl Config {
    /// Reads `file` (when given), then `KIOKU_*` variables of `env`.
    pub fn load(
        file: Option<&std::path::Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let mut pairs: Vec<(String, String, String)> = Vec::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| GroupError::Config(format!("cannot read {}: {e}", path.display())))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let Some((k, v)) = line.split_once('=') else {
                    return Err(GroupError::Config(format!(
                        "{}:{}: expected `key = value`",
                        path.display(),
                        n + 1
                    )));
                };
                let where_ = format!("{}:{}", path.display(), n + 1);
                pairs.push((k.trim().to_string(), v.trim().to_string(), where_));
            }
        }
        for key in KEYS {
            let var = format!("KIOKU_{}", key.to_uppercase());
            if let Some(v) = env(&var) {
                pairs.push((key.to_string(), v, var));
            }
        }
        let mut c = Config::default();
        for (k, v, at) in pairs {
            let bad = |why: &str| GroupError::Config(format!("{at}: {k} = {v:?}: {why}"));
            let num = |lo: usize, hi: usize| -> Result<usize> {
                v.parse::<usize>()
                    .ok()
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| bad(&format!("expected a number from {lo} to {hi}")))
            };
            match k.as_str() {
                "dir" => c.dir = PathBuf::from(&v),
                "name" => {
                    if v.is_empty() || v.contains('/') {
                        return Err(bad("a file name without '/'"));
                    }
                    c.name = v.clone()
                }
                "medium" => {
                    c.medium = if v == "auto" {
                        MediumChoice::Auto
                    } else {
                        MediumChoice::Exactly(
                            v.parse::<MediumKind>()
                                .map_err(|_| bad("auto, dax, file, shm or sim"))?,
                        )
                    }
                }
                "group_size" => c.group_size = num(2, 255)?,
                "parity" => c.parity = num(1, 32)?,
                "segment_pages" => c.segment_pages = num(1, 1 << 16)?,
                "full" => c.full = num(0, 1)? == 1,
                "flight_mib" => c.flight_mib = num(1, 1 << 16)?,
                "async" => {
                    c.async_mode = match v.as_str() {
                        "auto" => AsyncMode::Auto,
                        "1" | "on" | "yes" => AsyncMode::On,
                        "0" | "off" | "no" => AsyncMode::Off,
                        _ => return Err(bad("auto, 1 or 0")),
                    }
                }
                "levels" => {
                    c.partner = false;
                    c.rs = false;
                    for l in v.split(',').map(str::trim).filter(|l| !l.is_empty()) {
                        match l {
                            "local" => {}
                            "partner" => c.partner = true,
                            "rs" => c.rs = true,
                            _ => return Err(bad("a list of partner, rs (local is always kept)")),
                        }
                    }
                }
                _ => {
                    return Err(GroupError::Config(format!(
                        "{at}: unknown key {k:?} (known: {})",
                        KEYS.join(", ")
                    )))
                }
            }
        }
        Ok(c)
    }

    /// The pool of `rank`.
    pub fn pool_path(&self, rank: usize) -> PathBuf {
        self.dir.join(format!("{}.{rank}.pool", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_then_environment() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k.conf");
        std::fs::write(
            &f,
            "# comment\ngroup_size = 6\nparity=1\nlevels = partner, rs\n",
        )
        .unwrap();
        let env = |k: &str| (k == "KIOKU_PARITY").then(|| "2".to_string());
        let c = Config::load(Some(&f), &env).unwrap();
        assert_eq!(
            (c.group_size, c.parity, c.partner, c.rs),
            (6, 2, true, true)
        );
        std::fs::write(&f, "colour = blue\n").unwrap();
        let e = Config::load(Some(&f), &|_| None).unwrap_err().to_string();
        assert!(e.contains("unknown key") && e.contains("k.conf:1"), "{e}");
        let env = |k: &str| (k == "KIOKU_GROUP_SIZE").then(|| "x".to_string());
        let e = Config::load(None, &env).unwrap_err().to_string();
        assert!(e.contains("KIOKU_GROUP_SIZE"), "{e}");
    }
}
